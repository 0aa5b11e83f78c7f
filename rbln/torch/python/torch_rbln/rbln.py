"""`torch.rbln`: the device module, shaped like `torch.cuda`."""

import torch

from . import _C

__all__ = [
    "bind_device_memory",
    "counters",
    "current_device",
    "device",
    "device_count",
    "get_amp_supported_dtype",
    "get_device_profile",
    "is_available",
    "is_initialized",
    "manual_seed",
    "manual_seed_all",
    "set_device",
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


def _index(dev) -> int:
    if dev is None:
        return _C._current_device()
    if isinstance(dev, int):
        return dev
    dev = torch.device(dev)
    if dev.type != "rbln":
        raise ValueError(f"expected an rbln device, got {dev}")
    return _C._current_device() if dev.index is None else dev.index


def current_device() -> int:
    return _C._current_device()


def set_device(dev) -> None:
    """Selects the current device. Records the choice only (no commit)."""
    index = _index(dev)
    if index >= 0:
        _C._set_device(index)


class device:
    """Context manager that changes the selected device inside the block."""

    def __init__(self, dev):
        self.idx = -1 if dev is None else _index(dev)
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
    """Waits for all work on the device. A real use: commits the mapping."""
    _C._synchronize(_index(dev))


_initialized = False


def _lazy_init() -> None:
    global _initialized
    _initialized = True


def is_initialized() -> bool:
    return _C._is_committed()


def _is_in_bad_fork() -> bool:
    return False


def manual_seed(seed: int) -> None:
    torch.default_generator.manual_seed(seed)


def manual_seed_all(seed: int) -> None:
    # Random ops run on the CPU fallback with the CPU generator.
    torch.default_generator.manual_seed(seed)


def get_amp_supported_dtype():
    return [torch.float16, torch.bfloat16]


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
    nbytes = t.untyped_storage().nbytes()
    if t.storage_offset() != 0 or t.numel() * t.element_size() != nbytes:
        raise ValueError(
            "bind_device_memory needs a tensor that covers its whole storage "
            f"(storage offset {t.storage_offset()}, {t.numel() * t.element_size()} of "
            f"{nbytes} storage bytes); bind the base tensor instead of a view"
        )
    if nbytes:
        _C._bind_device_memory(t.data_ptr())
    return t


def _storage_info(t: torch.Tensor) -> dict:
    """Where `t`'s storage keeps its latest data (for tests and debugging)."""
    _check_rbln_tensor(t, "_storage_info")
    return _C._storage_info(t.untyped_storage().data_ptr())


def counters() -> dict:
    """Snapshot of the backend's event counters (compiles, DMA, fallbacks)."""
    return dict(_C._counters())
