"""Device memory statistics of torch.rbln, shaped like torch.cuda's (SPEC E).

All numbers are device memory of the simulated NPU's caching allocators:
lazy tensors count from the first device use that acquires memory (SPEC D3).
Nothing here commits the device mapping: before the first real use every
statistic is 0.
"""

import collections
import os

from . import _C

_MIB = float(1 << 20)


def _device(device):
    from . import rbln  # The device module resolves "rbln:1", None, ints.

    return rbln._checked_index(device)


def _npus(device):
    """Machine ids and visible-list ids of the NPUs of a logical device."""
    m = _C._device_map()
    machine = m["devices"][_device(device)]
    return [(n, m["visible_npus"].index(n)) for n in machine]


def _sum(dicts):
    out = collections.OrderedDict()
    for d in dicts:
        for k, v in d.items():
            out[k] = out.get(k, 0) + v
    return out


def memory_stats(device=None) -> "collections.OrderedDict[str, int]":
    """Same keys as torch.cuda.memory_stats() ("allocated_bytes.all.current",
    ...), summed over the chiplets of the device; peaks are exact."""
    stats = [_C._memory_stats(machine)["total"] for machine, _ in _npus(device)]
    return collections.OrderedDict(sorted(_sum(stats).items()))


def memory_stats_per_chiplet(device=None) -> "collections.OrderedDict[str, int]":
    """memory_stats() keys prefixed "npu.<n>.chiplet.<c>." (SPEC E5)."""
    out = collections.OrderedDict()
    for machine, npu in _npus(device):
        for c, stats in enumerate(_C._memory_stats(machine)["chiplets"]):
            for k in sorted(stats):
                out[f"npu.{npu}.chiplet.{c}.{k}"] = stats[k]
    return out


def memory_allocated(device=None) -> int:
    return memory_stats(device)["allocated_bytes.all.current"]


def max_memory_allocated(device=None) -> int:
    return memory_stats(device)["allocated_bytes.all.peak"]


def memory_reserved(device=None) -> int:
    return memory_stats(device)["reserved_bytes.all.current"]


def max_memory_reserved(device=None) -> int:
    return memory_stats(device)["reserved_bytes.all.peak"]


def reset_peak_memory_stats(device=None) -> None:
    for machine, _ in _npus(device):
        _C._reset_peak_memory_stats(machine)


def reset_accumulated_memory_stats(device=None) -> None:
    for machine, _ in _npus(device):
        _C._reset_accumulated_memory_stats(machine)


def empty_cache() -> None:
    """Returns cached device blocks to the runtime and drops the compiled
    programs' warm cache: the next eager call compiles again (SPEC E1)."""
    _C._empty_cache()


def memory_snapshot(device=None):
    """Segments and blocks per chiplet, like torch.cuda.memory_snapshot()."""
    out = []
    for machine, npu in _npus(device):
        for seg in _C._memory_snapshot(machine):
            seg = dict(seg)
            seg["npu"] = npu
            out.append(seg)
    return out


_RULE = "-" * 92


def memory_summary(device=None, abbreviated: bool = False) -> str:
    """One row per NPU and chiplet, in MiB (SPEC E6). Peaks are per chiplet, so
    the total row's peak columns are an upper bound of the true concurrent
    peak; the exact one is in memory_stats()."""
    index = _device(device)
    lines = [
        f"torch_rbln memory summary (device=rbln:{index}, MiB)",
        f"scope: pid {os.getpid()} -- caching allocator only, this process only",
        "npu: physical NPU id as in device_summary() (relative to RBLN_VISIBLE_DEVICES, may differ from rbln-smi)",
        "  npu  chiplet    allocated   alloc peak     reserved    resv peak       active       cached",
        _RULE,
    ]
    keys = (
        "allocated_bytes.all.current",
        "allocated_bytes.all.peak",
        "reserved_bytes.all.current",
        "reserved_bytes.all.peak",
        "active_bytes.all.current",
    )
    totals = [0] * 6
    retries = ooms = 0
    for machine, npu in _npus(index):
        for c, s in enumerate(_C._memory_stats(machine)["chiplets"]):
            row = [s[k] for k in keys]
            row.append(s["reserved_bytes.all.current"] - s["allocated_bytes.all.current"])
            totals = [t + v for t, v in zip(totals, row)]
            retries += s["num_alloc_retries"]
            ooms += s["num_ooms"]
            lines.append(f"{npu:5d}{c:9d}" + "".join(f"{v / _MIB:13.1f}" for v in row))
    lines.append(_RULE)
    lines.append(f"{'total':>14s}" + "".join(f"{v / _MIB:13.1f}" for v in totals))
    lines.append(f"alloc retries: {retries}   ooms: {ooms}")
    return "\n".join(lines)
