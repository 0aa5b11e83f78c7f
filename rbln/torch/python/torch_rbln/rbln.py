"""`torch.rbln`: the device module, shaped like `torch.cuda`.

The torch.cuda names porting code calls have twins here, each behaving as on
CUDA or raising an error that says why it cannot on rbln; the list and what
each does is rbln/torch/python/tests/cuda_parity_names.txt.
"""

import time

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
from . import streams  # noqa: F401  (torch.rbln.streams, as torch.cuda.streams)
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
    release_host_copies,
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
    "ExternalStream",
    "MemPool",
    "Stream",
    "StreamContext",
    "amp",
    "bind_device_memory",
    "caching_allocator_alloc",
    "caching_allocator_delete",
    "caching_allocator_disabled",
    "caching_allocator_enable",
    "can_device_access_peer",
    "clock_rate",
    "compiled_programs",
    "counters",
    "current_device",
    "current_stream",
    "default_generators",
    "default_stream",
    "device",
    "device_count",
    "device_memory_used",
    "device_of",
    "device_summary",
    "empty_cache",
    "explain",
    "get_allocator_backend",
    "get_amp_supported_dtype",
    "get_arch_list",
    "get_device_capability",
    "get_device_name",
    "get_device_profile",
    "get_device_properties",
    "get_per_process_memory_fraction",
    "get_rng_state",
    "get_rng_state_all",
    "get_stream_from_external",
    "get_sync_debug_mode",
    "graph",
    "graph_pool_handle",
    "has_half",
    "host_memory_stats",
    "host_memory_stats_as_nested_dict",
    "huge_host_empty",
    "init",
    "initial_seed",
    "ipc_collect",
    "is_available",
    "is_bf16_supported",
    "is_current_stream_capturing",
    "is_initialized",
    "is_tf32_supported",
    "list_gpu_processes",
    "make_graphed_callables",
    "manual_seed",
    "manual_seed_all",
    "mark_repeated_layers",
    "max_memory_allocated",
    "max_memory_cached",
    "max_memory_reserved",
    "mem_get_info",
    "mem_get_info_per_chiplet",
    "memory",
    "memory_allocated",
    "memory_cached",
    "memory_reserved",
    "memory_snapshot",
    "memory_stats",
    "memory_stats_as_nested_dict",
    "memory_stats_per_chiplet",
    "memory_summary",
    "memory_usage",
    "offload",
    "physical_device_count",
    "power_draw",
    "random",
    "release_host_copies",
    "reset_accumulated_host_memory_stats",
    "reset_accumulated_memory_stats",
    "reset_max_memory_allocated",
    "reset_max_memory_cached",
    "reset_peak_host_memory_stats",
    "reset_peak_memory_stats",
    "seed",
    "seed_all",
    "set_device",
    "set_device_layout_like",
    "set_per_process_memory_fraction",
    "set_rng_state",
    "set_rng_state_all",
    "set_stream",
    "set_sync_debug_mode",
    "stream",
    "streams",
    "synchronize",
    "temperature",
    "use_mem_pool",
    "utilization",
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


# get_device_capability(): the NPU generation, (major, minor): ATOM is the
# first, REBEL (the rebel100 card) the second.
_CAPABILITY = {"atom": (1, 0), "rebel100": (2, 0)}


class _RblnDeviceProperties:
    """What `get_device_properties()` returns, shaped like torch.cuda's: name,
    total_memory, major/minor (get_device_capability()), multi_processor_count
    (compute units: chiplets x NPUs), is_integrated; plus the card's family,
    chiplets per NPU, memory per chiplet and its NPUs."""

    def __init__(self, name, family, num_chiplet, npu_count, memory_per_chiplet, npus):
        self.name = name
        self.family = family
        self.num_chiplet = num_chiplet
        self.npu_count = npu_count
        self.memory_per_chiplet = memory_per_chiplet
        self.total_memory = memory_per_chiplet * num_chiplet * npu_count
        self.npus = npus
        self.major, self.minor = _CAPABILITY[family]
        self.multi_processor_count = num_chiplet * npu_count
        self.is_integrated = False

    def __repr__(self):
        return (
            f"_RblnDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor}, "
            f"npu_count={self.npu_count}, num_chiplet={self.num_chiplet}, "
            f"memory_per_chiplet={self.memory_per_chiplet >> 20}MB, "
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


def get_device_capability(dev=None) -> tuple:
    """(major, minor): the NPU generation (ATOM (1, 0), REBEL (2, 0))."""
    p = get_device_properties(dev)
    return p.major, p.minor


def get_arch_list() -> list:
    """The device families this build's compiler generates code for."""
    return sorted(_CAPABILITY)


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """True: compiled kernels compute in bfloat16 (and float16)."""
    return is_available() and torch.bfloat16 in get_amp_supported_dtype()


def is_tf32_supported() -> bool:
    """False: float32 math runs in float32; there is no TF32 mode to enable."""
    return False


has_half = True


def init() -> None:
    """Initializes the device state: commits the device mapping (SPEC A6), as
    torch.cuda.init() initializes CUDA. Raises if the environment is invalid."""
    _C._init()


def can_device_access_peer(dev, peer) -> bool:
    """True for any two rbln devices of this process: the runtime copies
    between their memories directly (SPEC B4)."""
    _checked_index(dev)
    _checked_index(peer)
    return True


def ipc_collect() -> None:
    """Nothing to collect: rbln memory is never shared with other processes
    (no IPC handles), so no freed IPC memory waits here."""


def get_allocator_backend() -> str:
    """"native": the runtime's per-chiplet caching allocators."""
    return "native"


def caching_allocator_enable(value: bool = True) -> None:
    """The caching allocator is the runtime's and always on; `False` raises."""
    if not value:
        raise RuntimeError(
            "rbln: the caching allocator cannot be disabled: device memory is managed by the runtime's "
            "per-chiplet caching allocators; call torch.rbln.empty_cache() to return cached blocks"
        )


def is_current_stream_capturing() -> bool:
    """False: rbln has no stream (graph) capture; torch.compile(backend="rbln")
    compiles whole graphs instead."""
    return False


def _machine_npus(dev):
    m = _C._device_map()
    return set(m["devices"][_checked_index(dev)])


def _smi_processes():
    """Live processes publishing rbln statistics (the data rbln-smi reads)."""
    from . import smi

    processes, _, _ = smi.scan(smi.default_dir())
    return processes


def device_memory_used(dev=None) -> int:
    """Device memory reserved on the device's NPUs by every process (this one
    included, once it used the device), as rbln-smi shows it."""
    npus = _machine_npus(dev)
    return sum(c["reserved_current"] for p in _smi_processes() for c in p["chiplets"] if c["npu"] in npus)


def list_gpu_processes(dev=None) -> str:
    """The processes using the device and their device memory, as rbln-smi
    shows them (torch.cuda.list_gpu_processes' format)."""
    index = _checked_index(dev)
    npus = _machine_npus(index)
    lines = [f"RBLN:{index}"]
    rows = []
    for p in _smi_processes():
        chiplets = [c for c in p["chiplets"] if c["npu"] in npus]
        if chiplets:
            rows.append((p["pid"], sum(c["reserved_current"] for c in chiplets)))
    if not rows:
        lines.append("no processes are running")
    for pid, used in rows:
        lines.append(f"process {pid:>10d} uses {used / (1024 * 1024):>12.3f} MB device memory")
    return "\n".join(lines)


# utilization()'s sample period (nvidia-smi samples over 1/6 s to 1 s).
_UTILIZATION_SAMPLE_S = 0.1


def _busy_ns(npus):
    return {
        p["pid"]: sum(c["busy_ns"] for c in p["chiplets"] if c["npu"] in npus) for p in _smi_processes()
    }


def utilization(dev=None) -> int:
    """Percent (0-100) of the last sample period during which the device's
    chiplets ran programs, averaged over the chiplets, all processes
    together -- from the busy time every process publishes for rbln-smi. The
    call takes the sample itself: it waits 0.1 s."""
    index = _checked_index(dev)
    npus = _machine_npus(index)
    units = len(npus) * get_device_properties(index).num_chiplet
    before, t0 = _busy_ns(npus), time.monotonic_ns()
    time.sleep(_UTILIZATION_SAMPLE_S)
    after, t1 = _busy_ns(npus), time.monotonic_ns()
    busy = sum(after[pid] - before[pid] for pid in after if pid in before)
    return max(0, min(100, round(100 * busy / ((t1 - t0) * units))))


def _unsupported(name, why):
    def raise_error(*args, **kwargs):
        raise RuntimeError(f"rbln: torch.rbln.{name} is not supported: {why}")

    raise_error.__name__ = name
    raise_error.__qualname__ = name
    raise_error.__doc__ = f"Raises: {why}."
    return raise_error


caching_allocator_disabled = _unsupported(
    "caching_allocator_disabled",
    "device memory is only handed out by the runtime's per-chiplet caching allocators; "
    "torch.rbln.empty_cache() returns cached blocks",
)


_NO_GRAPHS = (
    "rbln has no stream capture (CUDA graphs); torch.compile(model, backend='rbln') compiles the "
    "whole graph into one program and replays it with the same low launch cost"
)
graph = _unsupported("graph", _NO_GRAPHS)
make_graphed_callables = _unsupported("make_graphed_callables", _NO_GRAPHS)
graph_pool_handle = _unsupported("graph_pool_handle", _NO_GRAPHS)
_NO_POOLS = (
    "device memory comes from the runtime's per-chiplet caching allocators, which have no "
    "user-created pools; set_per_process_memory_fraction() limits a process instead"
)
MemPool = _unsupported("MemPool", _NO_POOLS)
use_mem_pool = _unsupported("use_mem_pool", _NO_POOLS)
_NO_EXTERNAL_STREAMS = "rbln streams are the runtime's; there are no driver streams to wrap"
ExternalStream = _unsupported("ExternalStream", _NO_EXTERNAL_STREAMS)
get_stream_from_external = _unsupported("get_stream_from_external", _NO_EXTERNAL_STREAMS)


def _no_sensor(what):
    raise RuntimeError(
        f"rbln: {what} is not available: the simulated NPU has no sensors; utilization(), "
        "device_memory_used() and memory_stats() report what it measures"
    )


def mark_repeated_layers(model, min_repeats: int = 2) -> int:
    """Marks a model's repeated layers (same-class children of an
    nn.ModuleList, e.g. the decoder layers) as nested compile regions, so
    torch.compile captures one layer instead of every one; returns how many
    layers it marked. See torch_rbln._dynamo.nested_regions."""
    from ._dynamo.nested_regions import mark_repeated_layers as mark

    return mark(model, min_repeats)


def memory_usage(dev=None) -> int:
    """Raises: the runtime does not sample memory-bus activity."""
    _checked_index(dev)
    raise RuntimeError(
        "rbln: memory_usage (percent of time device memory was read or written) is not measured by the "
        "simulated NPU's runtime; explain() counts DMA transfers and utilization() reports compute time"
    )


def temperature(dev=None) -> int:
    """Raises: no sensor on the simulated NPU."""
    _checked_index(dev)
    _no_sensor("temperature")


def power_draw(dev=None) -> int:
    """Raises: no sensor on the simulated NPU."""
    _checked_index(dev)
    _no_sensor("power_draw")


def clock_rate(dev=None) -> int:
    """Raises: the simulated NPU has no clock to report (its programs run on
    the host CPU)."""
    _checked_index(dev)
    _no_sensor("clock_rate")


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


class device_of(device):
    """Context manager that selects the device of `obj` (a tensor or storage)
    inside the block; no-op for objects not on rbln."""

    def __init__(self, obj):
        super().__init__(obj.get_device() if obj.device.type == "rbln" else None)


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
        _C._bind_device_memory(t.data_ptr(), t.device.index)
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
