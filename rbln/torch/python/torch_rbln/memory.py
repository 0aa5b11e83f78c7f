"""Device memory statistics of torch.rbln, shaped like torch.cuda's (SPEC E),
and the memory history and snapshots of torch.cuda.memory.

All numbers are device memory of the simulated NPU's caching allocators:
lazy tensors count from the first device use that acquires memory (SPEC D3).
Nothing here commits the device mapping: before the first real use every
statistic is 0 (set_per_process_memory_fraction and caching_allocator_alloc
are real uses).

Memory history (`_record_memory_history`, `_snapshot`, `_dump_snapshot`)
writes what torch.cuda.memory._snapshot() writes, so PyTorch's memory
visualizer (pytorch.org/memory_viz, torch.cuda._memory_viz) reads it. A
"device" of a snapshot is a chiplet: device i is chiplet i % C of NPU i // C
(C chiplets per NPU, NPU ids as device_summary()'s machine ids); segments and
blocks also carry "npu" and "chiplet". A block's frames are the Python stack
where its tensor was created (device memory is acquired later, at the
tensor's first device use). With TORCH_RBLN_OOM_SNAPSHOT=DIR, an rbln
out-of-memory error first writes a snapshot to DIR and names the file in its
message.
"""

import collections
import os
import pickle
import sys
import time
import warnings

import torch

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


def reset_max_memory_allocated(device=None) -> None:
    """As torch.cuda's: resets all peak statistics (reset_peak_memory_stats)."""
    warnings.warn(
        "torch.rbln.reset_max_memory_allocated now calls torch.rbln.reset_peak_memory_stats, "
        "which resets /all/ peak memory stats.",
        FutureWarning,
        stacklevel=2,
    )
    reset_peak_memory_stats(device)


def reset_max_memory_cached(device=None) -> None:
    """As torch.cuda's: resets all peak statistics (reset_peak_memory_stats)."""
    warnings.warn(
        "torch.rbln.reset_max_memory_cached now calls torch.rbln.reset_peak_memory_stats, "
        "which resets /all/ peak memory stats.",
        FutureWarning,
        stacklevel=2,
    )
    reset_peak_memory_stats(device)


def memory_cached(device=None) -> int:
    """Deprecated name of memory_reserved(), as on CUDA."""
    return memory_reserved(device)


def max_memory_cached(device=None) -> int:
    """Deprecated name of max_memory_reserved(), as on CUDA."""
    return max_memory_reserved(device)


def memory_stats_as_nested_dict(device=None) -> dict:
    """memory_stats() as nested dicts ("allocated_bytes" -> "all" -> "current")."""
    out = {}
    for key, value in memory_stats(device).items():
        node = out
        *path, last = key.split(".")
        for part in path:
            node = node.setdefault(part, {})
        node[last] = value
    return out


def set_per_process_memory_fraction(fraction, device=None) -> None:
    """Limits this process to `fraction` of each chiplet's memory on `device`.

    Enforced per chiplet by the caching allocators (a storage lives on one
    chiplet, SPEC E7): an allocation that would reserve more of a chiplet
    raises an out-of-memory error that names the chiplet and the fraction.
    Commits the device mapping (a real use), as CUDA initializes itself.
    """
    if not isinstance(fraction, float):
        raise TypeError("Invalid type for fraction argument, must be `float`")
    if fraction < 0 or fraction > 1:
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    for machine, _ in _npus(device):
        _C._set_memory_fraction(machine, fraction)


def get_per_process_memory_fraction(device=None) -> float:
    """The fraction set by set_per_process_memory_fraction (1.0 if none)."""
    return min(_C._memory_fraction(machine) for machine, _ in _npus(device))


def caching_allocator_alloc(size, device=None, stream=None) -> int:
    """`size` bytes of device memory from the caching allocator, as an
    address (int). The memory is acquired now (one flat region) and counts in
    memory_allocated() until caching_allocator_delete(address)."""
    index = _device(device)
    if stream is not None and getattr(stream, "device_index", index) != index:
        raise ValueError(
            f"caching_allocator_alloc: the stream is on rbln:{stream.device_index}, not on rbln:{index}"
        )
    if not isinstance(size, int) or size < 0:
        raise TypeError("Invalid type for size argument, must be a non-negative `int`")
    return _C._caching_allocator_alloc(size, index)


def caching_allocator_delete(mem_ptr: int) -> None:
    """Frees memory from caching_allocator_alloc()."""
    _C._caching_allocator_delete(int(mem_ptr))


def host_memory_stats() -> "collections.OrderedDict[str, int]":
    """Statistics of the pinned host allocator (pin_memory=True), with
    torch.cuda.host_memory_stats()'s keys. It caches nothing: a freed block
    goes back to the system at once, so "allocations" equal
    "active_requests"."""
    result = []

    def add(prefix, obj):
        if isinstance(obj, dict):
            for k, v in obj.items():
                add(f"{prefix}.{k}" if prefix else k, v)
        else:
            result.append((prefix, obj))

    add("", host_memory_stats_as_nested_dict())
    return collections.OrderedDict(sorted(result))


def host_memory_stats_as_nested_dict() -> dict:
    """host_memory_stats() as nested dicts."""
    return _C._host_memory_stats()


def reset_accumulated_host_memory_stats() -> None:
    _C._reset_host_memory_stats(False)


def reset_peak_host_memory_stats() -> None:
    _C._reset_host_memory_stats(True)


def release_host_copies(tensors) -> int:
    """Frees the host copies of rbln tensors whose bytes are also on the
    device (in sync, SPEC D2) -- a model's weights after the programs that
    read them ran -- and returns the bytes freed. `tensors`: a tensor, an
    nn.Module (its parameters and buffers) or an iterable of tensors.

    An rbln tensor made from host data keeps that host copy while it is in
    sync, so a served model's weights occupy host memory as well as device
    memory (CUDA keeps none). A freed tensor is device-latest: a later host
    read downloads it again. Host-latest tensors (never used on the device)
    and offloaded ones (`torch.rbln.offload`) keep theirs."""
    if isinstance(tensors, torch.Tensor):
        tensors = [tensors]
    elif isinstance(tensors, torch.nn.Module):
        tensors = list(tensors.parameters()) + list(tensors.buffers())
    from .rbln import _check_rbln_tensor  # rbln.py imports this module

    freed, seen = 0, set()
    for t in tensors:
        _check_rbln_tensor(t, "release_host_copies")
        storage = t.untyped_storage()
        if storage.nbytes() == 0 or storage.data_ptr() in seen:
            continue
        seen.add(storage.data_ptr())
        freed += _C._release_host_copy(storage.data_ptr())
    return freed


def _record_memory_history(
    enabled="all",
    context="all",
    stacks="all",
    max_entries=sys.maxsize,
    device=None,
    clear_history=False,
    compile_context=False,
    global_record_annotations=False,
    skip_actions=None,
) -> None:
    """torch.cuda.memory._record_memory_history for rbln: `enabled` None,
    "state" (stacks of live blocks) or "all" (also a trace of every alloc,
    free, segment and OOM event, up to `max_entries` per chiplet); `context`
    None, "state", "alloc" or "all" (which events keep stacks); `stacks`
    "python" or "all" (adds C++ frames). A bool `enabled` is the legacy form
    (True = "all"). `device`, `compile_context` and
    `global_record_annotations` are accepted and have no effect here:
    recording covers every chiplet of the process."""
    if isinstance(enabled, bool):
        enabled = "all" if enabled else None
    _C._record_memory_history(
        enabled or "",
        context or "",
        stacks,
        0 if max_entries >= sys.maxsize else int(max_entries),
        bool(clear_history),
        list(skip_actions or []),
    )


def _snapshot(device=None, augment_with_fx_traces=False) -> dict:
    """The device memory now, as torch.cuda.memory._snapshot(): "segments"
    (with their blocks, per chiplet) and "device_traces" (one trace per
    chiplet; empty unless recording with enabled="all")."""
    return _C._memory_history_snapshot()


def _dump_snapshot(filename="dump_snapshot.pickle", augment_with_fx_traces=False) -> None:
    """Pickles _snapshot() to `filename`, for pytorch.org/memory_viz or
    python -m torch.cuda._memory_viz."""
    snapshot = _snapshot()
    with open(filename, "wb") as f:
        pickle.dump(snapshot, f)


_OOM_SNAPSHOT_ENV = "TORCH_RBLN_OOM_SNAPSHOT"
_oom_snapshots = 0


def _write_oom_snapshot(directory, message):
    global _oom_snapshots
    _oom_snapshots += 1
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(
        directory, f"rbln_oom_snapshot_{os.getpid()}_{time.strftime('%Y%m%d-%H%M%S')}_{_oom_snapshots}.pickle"
    )
    _dump_snapshot(path)
    return f"; memory snapshot written to {path} ({_OOM_SNAPSHOT_ENV}; open it at pytorch.org/memory_viz)"


def _install_oom_snapshot():
    """With TORCH_RBLN_OOM_SNAPSHOT=DIR, every rbln OOM dumps a snapshot."""
    directory = os.environ.get(_OOM_SNAPSHOT_ENV, "")
    if directory:
        _C._set_oom_observer(lambda message: _write_oom_snapshot(directory, message))


_install_oom_snapshot()


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
