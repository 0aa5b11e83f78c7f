"""`torch.rbln`: the device module, shaped like `torch.cuda`."""

import torch

from . import _C
from .explain import explain  # noqa: F401
from .host_memory import huge_host_empty, offload  # noqa: F401
from .streams import _device_index
from .streams import (  # noqa: F401  (re-exported as torch.rbln.*)
    Event,
    Stream,
    StreamContext,
    current_stream,
    default_stream,
    set_stream,
    stream,
)
from . import amp  # noqa: F401  (torch.rbln.amp, as torch.cuda.amp)
from . import memory  # noqa: F401  (torch.rbln.memory, as torch.cuda.memory)
from . import random  # noqa: F401  (torch.rbln.random, as torch.cuda.random)
from .random import (  # noqa: F401  (re-exported as torch.rbln.*)
    get_rng_state,
    get_rng_state_all,
    initial_seed,
    manual_seed,
    manual_seed_all,
    seed,
    seed_all,
    set_rng_state,
    set_rng_state_all,
)
from .memory import (  # noqa: F401  (re-exported as torch.rbln.*)
    caching_allocator_alloc,
    caching_allocator_delete,
    empty_cache,
    get_per_process_memory_fraction,
    host_memory_stats,
    host_memory_stats_as_nested_dict,
    max_memory_allocated,
    max_memory_cached,
    max_memory_reserved,
    memory_allocated,
    memory_cached,
    memory_reserved,
    memory_snapshot,
    memory_stats,
    memory_stats_as_nested_dict,
    memory_stats_per_chiplet,
    memory_summary,
    reset_accumulated_host_memory_stats,
    reset_accumulated_memory_stats,
    reset_max_memory_allocated,
    reset_max_memory_cached,
    reset_peak_host_memory_stats,
    reset_peak_memory_stats,
    set_per_process_memory_fraction,
)

__all__ = [
    "Event",
    "Stream",
    "StreamContext",
    "current_stream",
    "default_stream",
    "set_stream",
    "stream",
    "bind_device_memory",
    "compiled_programs",
    "counters",
    "current_device",
    "device",
    "device_count",
    "device_summary",
    "empty_cache",
    "explain",
    "max_memory_allocated",
    "max_memory_reserved",
    "memory_allocated",
    "memory_reserved",
    "memory_snapshot",
    "memory_stats",
    "memory_stats_per_chiplet",
    "memory_summary",
    "reset_accumulated_memory_stats",
    "reset_peak_memory_stats",
    "get_amp_supported_dtype",
    "get_device_name",
    "get_device_profile",
    "get_device_properties",
    "huge_host_empty",
    "mem_get_info",
    "mem_get_info_per_chiplet",
    "offload",
    "physical_device_count",
    "is_available",
    "is_initialized",
    "default_generators",
    "get_rng_state",
    "get_rng_state_all",
    "initial_seed",
    "manual_seed",
    "manual_seed_all",
    "seed",
    "seed_all",
    "set_rng_state",
    "set_rng_state_all",
    "get_sync_debug_mode",
    "set_device",
    "set_device_layout_like",
    "set_sync_debug_mode",
    "synchronize",
]


def device_count() -> int:
    """Number of logical rbln devices. Plans the mapping; occupies nothing.

    Raises ValueError naming the variable when the environment is invalid.
    """
    return _C._device_count()


def is_available() -> bool:
    """True when at least one rbln device is visible. Never raises."""
    try:
        return _C._device_count() > 0
    except (ValueError, RuntimeError):
        return False




def physical_device_count() -> int:
    """Number of physical NPUs this process sees (RBLN_VISIBLE_DEVICES)."""
    return len(_C._device_map()["visible_npus"])


_FAMILY_NAMES = {"rebel100": "RBLN-CR (Rebel100, simulated)", "atom": "RBLN-CA (ATOM, simulated)"}


class _RblnDeviceProperties:
    """What `get_device_properties()` returns, shaped like torch.cuda's."""

    def __init__(self, name, family, num_chiplet, npu_count, memory_per_chiplet, npus):
        self.name = name
        self.family = family
        self.num_chiplet = num_chiplet
        self.npu_count = npu_count
        self.memory_per_chiplet = memory_per_chiplet
        self.total_memory = memory_per_chiplet * num_chiplet * npu_count
        self.npus = npus

    def __repr__(self):
        return (
            f"_RblnDeviceProperties(name='{self.name}', npu_count={self.npu_count}, "
            f"num_chiplet={self.num_chiplet}, memory_per_chiplet={self.memory_per_chiplet >> 20}MB, "
            f"total_memory={self.total_memory >> 20}MB, npus={self.npus})"
        )


def _checked_index(dev) -> int:
    index = _device_index(dev)
    _C._check_device_index(index)
    return index


def get_device_properties(dev=None) -> _RblnDeviceProperties:
    """Properties of a logical device: its NPUs, chiplets and memory."""
    index = _checked_index(dev)
    m = _C._device_map()
    p = m["profile"]
    npus = [m["visible_npus"].index(n) for n in m["devices"][index]]
    return _RblnDeviceProperties(
        _FAMILY_NAMES[p["name"]], p["name"], p["chiplets_per_npu"], len(npus), p["memory_per_chiplet"], npus
    )


def get_device_name(dev=None) -> str:
    return get_device_properties(dev).name


def mem_get_info_per_chiplet(dev=None):
    """[(npu, chiplet, free_bytes, total_bytes)] for each chiplet of the device.

    `npu` is the NPU id as device_summary() prints it (an index into the
    RBLN_VISIBLE_DEVICES list).
    """
    index = _checked_index(dev)
    m = _C._device_map()
    out = []
    for machine_id in m["devices"][index]:
        npu = m["visible_npus"].index(machine_id)
        for chiplet, (_, free, total) in enumerate(_C._chiplet_memory(machine_id)):
            out.append((npu, chiplet, free, total))
    return out


def mem_get_info(dev=None):
    """(free_bytes, total_bytes) of the logical device, like torch.cuda."""
    rows = mem_get_info_per_chiplet(dev)
    return sum(r[2] for r in rows), sum(r[3] for r in rows)


def device_summary() -> str:
    """Logical device -> physical NPUs, chiplets and memory (SPEC A3).

    NPU ids are indices into RBLN_VISIBLE_DEVICES' list, as group variables
    use; the machine id column is the NPU's id among all simulated NPUs.
    Planning only: calling this occupies no NPU.
    """
    m = _C._device_map()
    p = m["profile"]
    lines = [
        f"torch_rbln device summary ({p['name']}, {len(m['visible_npus'])} visible NPU(s) of "
        f"{p['num_npus']}, {'committed' if m['committed'] else 'planned, not committed'})",
        f"{'device':>8s}  {'npu':12s} {'machine id':12s} {'chiplets':>8s} {'memory/chiplet':>15s} {'total':>10s}",
    ]
    for i, npus in enumerate(m["devices"]):
        idx = [m["visible_npus"].index(n) for n in npus]
        total = p["memory_per_chiplet"] * p["chiplets_per_npu"] * len(npus)
        lines.append(
            f"{'rbln:' + str(i):>8s}  {','.join(map(str, idx)):12s} {','.join(map(str, npus)):12s} "
            f"{p['chiplets_per_npu']:8d} {p['memory_per_chiplet'] / 2**20:12.0f} MiB {total / 2**30:6.1f} GiB"
        )
    used = {n for npus in m["devices"] for n in npus}
    unused = [n for n in m["visible_npus"] if n not in used]
    if unused:
        lines.append(f"unused NPUs (machine ids): {', '.join(map(str, unused))}")
    for w in m["warnings"]:
        lines.append(f"warning: {w}")
    return "\n".join(lines)


def current_device() -> int:
    return _C._current_device()


def set_device(dev) -> None:
    """Selects the current device. Records the choice only (no commit)."""
    index = _device_index(dev)
    if index >= 0:
        _C._set_device(index)


class device:
    """Context manager that changes the selected device inside the block."""

    def __init__(self, dev):
        self.idx = -1 if dev is None else _device_index(dev)
        self.prev_idx = -1

    def __enter__(self):
        if self.idx >= 0:
            self.prev_idx = _C._current_device()
            _C._set_device(self.idx)
        return self

    def __exit__(self, *exc):
        if self.prev_idx >= 0:
            _C._set_device(self.prev_idx)
        return False


def synchronize(dev=None) -> None:
    """Waits for all streams of the device (current by default): pending
    asynchronous transfers, fences and event markers (SPEC M3). A real use:
    commits the mapping. Raises the error of a failed asynchronous task."""
    _C._synchronize(_device_index(dev))


_initialized = False


def _lazy_init() -> None:
    global _initialized
    _initialized = True


def is_initialized() -> bool:
    return _C._is_committed()


def _is_in_bad_fork() -> bool:
    """True in a child forked after the parent used the device (SPEC C1)."""
    return _C._is_in_bad_fork()


def __getattr__(name):
    # torch.rbln.default_generators, made when asked for: the device count is
    # only known (planned) once the environment is read.
    if name == "default_generators":
        from .random import _device_count

        return tuple(_C._default_generator(i) for i in range(_device_count()))
    raise AttributeError(f"module 'torch.rbln' has no attribute '{name}'")


_SYNC_DEBUG_MODES = {"default": 0, "warn": 1, "error": 2}


def set_sync_debug_mode(debug_mode) -> None:
    """Warns about (1, "warn") or raises on (2, "error") every operation that
    synchronizes the host with an rbln device, naming the op and the Python
    line: host reads of device data (.item(), .cpu(), printing, the NaN/Inf
    check's reads, ops that run on the CPU with device-resident inputs,
    dtype-converting copies through the host) and explicit waits
    (torch.rbln.synchronize(), Stream/Event.synchronize()). Reads of data
    whose latest copy is on the host move nothing and are not reported.
    0 ("default") turns it off. The per-call twin of explain()."""
    if isinstance(debug_mode, str):
        if debug_mode not in _SYNC_DEBUG_MODES:
            raise RuntimeError("invalid value of debug_mode, expected one of `default`, `warn`, `error`")
        debug_mode = _SYNC_DEBUG_MODES[debug_mode]
    if debug_mode not in (0, 1, 2):
        raise RuntimeError("invalid value of debug_mode, expected 0, 1 or 2 (`default`, `warn`, `error`)")
    _C._set_sync_debug_mode(int(debug_mode))


def get_sync_debug_mode() -> int:
    """The current sync debug mode: 0 default, 1 warn, 2 error."""
    return _C._get_sync_debug_mode()


def get_amp_supported_dtype():
    # The dtypes compiled kernels compute in (one table, device_dtypes.h).
    return [getattr(torch, name) for name in _C._compiled_kernel_dtypes()]


def get_device_profile() -> dict:
    """The simulated hardware profile (RBLN_SIM_* environment)."""
    return _C._device_profile()


def _check_rbln_tensor(t, api):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{api} expects a torch.Tensor, got {type(t).__name__}")
    if t.device.type != "rbln":
        raise ValueError(f"{api} expects an rbln tensor, got one on {t.device}; move it with .to('rbln') first")


def bind_device_memory(t: torch.Tensor) -> torch.Tensor:
    """Acquires device memory for `t` now, as one flat region (SPEC D6).

    `t` must be a contiguous rbln tensor covering its whole storage (storage
    offset 0). Returns `t`.
    """
    _check_rbln_tensor(t, "bind_device_memory")
    if not t.is_contiguous():
        raise ValueError("bind_device_memory needs a contiguous tensor; call .contiguous() first")
    _check_whole_storage(t, "bind_device_memory", "the tensor")
    if t.numel():
        _C._bind_device_memory(t.data_ptr())
    return t


def _check_whole_storage(t, api, name):
    nbytes = t.untyped_storage().nbytes()
    if t.storage_offset() != 0 or t.numel() * t.element_size() != nbytes:
        raise ValueError(
            f"{api} needs {name} to cover its whole storage (storage offset "
            f"{t.storage_offset()}, {t.numel() * t.element_size()} of {nbytes} storage bytes); "
            "pass the base tensor instead of a view"
        )


def set_device_layout_like(target: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """Aligns `target`'s device layout with `ref`'s (SPEC D7): later
    device-to-device copies between them stay on one chiplet. Copies no data.

    Both must be rbln tensors on one device with one dtype, each covering its
    whole storage; `ref`'s data must be on the device. Returns `target`.
    """
    api = "set_device_layout_like"
    _check_rbln_tensor(target, api)
    _check_rbln_tensor(ref, api)
    if target.device != ref.device:
        raise ValueError(f"{api} needs both tensors on one device, got {target.device} and {ref.device}")
    if target.dtype != ref.dtype:
        raise ValueError(f"{api} needs one dtype, got {target.dtype} and {ref.dtype}")
    _check_whole_storage(target, api, "target")
    _check_whole_storage(ref, api, "ref")
    if target.numel():
        _C._set_layout_like(target.data_ptr(), ref.data_ptr())
    return target


def _storage_info(t: torch.Tensor) -> dict:
    """Where `t`'s storage keeps its latest data (for tests and debugging)."""
    _check_rbln_tensor(t, "_storage_info")
    return _C._storage_info(t.untyped_storage().data_ptr())


def counters() -> dict:
    """Snapshot of the backend's event counters (compiles, DMA, fallbacks)."""
    return dict(_C._counters())


def compiled_programs():
    """Graphs compiled by torch.compile(backend="rbln") since the last
    torch._dynamo.reset(); each has `inspect()` (ops, host ops with
    host_op_reason, device bytes per chiplet)."""
    from ._dynamo import compiled_programs as _programs

    return _programs()
