"""`torch.rbln`: the device module, shaped like `torch.cuda`."""

import torch

from . import _C

__all__ = [
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


def counters() -> dict:
    """Snapshot of the backend's event counters (compiles, DMA, fallbacks)."""
    return dict(_C._counters())
