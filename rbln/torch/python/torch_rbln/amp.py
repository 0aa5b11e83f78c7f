"""`torch.rbln.amp`: mixed precision on rbln, shaped like `torch.cuda.amp`.

`torch.autocast("rbln", dtype=...)` and `torch.amp.GradScaler("rbln")` are
the device-generic spellings; these are the twins of torch.cuda.amp's names
for porting code. Autocast on rbln follows CUDA's autocast policy (the op
lists of ATen's autocast_mode.h, registered for AutocastPrivateUse1); float16
is the default autocast dtype, as on CUDA, and bfloat16 works too.
"""

import torch

__all__ = [
    "GradScaler",
    "amp_definitely_not_available",
    "autocast",
    "custom_bwd",
    "custom_fwd",
]


class autocast(torch.amp.autocast_mode.autocast):
    """`torch.autocast("rbln", ...)` with torch.cuda.amp.autocast's signature."""

    def __init__(self, enabled: bool = True, dtype: torch.dtype = torch.float16, cache_enabled: bool = True):
        super().__init__("rbln", enabled=enabled, dtype=dtype, cache_enabled=cache_enabled)


class GradScaler(torch.amp.GradScaler):
    """`torch.amp.GradScaler("rbln", ...)` with torch.cuda.amp.GradScaler's
    signature. Its unscale/inf-check and scale-update kernels run on the host
    for rbln tensors; the scale and found_inf tensors stay on the device."""

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ) -> None:
        super().__init__(
            "rbln",
            init_scale=init_scale,
            growth_factor=growth_factor,
            backoff_factor=backoff_factor,
            growth_interval=growth_interval,
            enabled=enabled,
        )


def custom_fwd(fwd=None, *, cast_inputs=None):
    """`torch.amp.custom_fwd(device_type="rbln")`."""
    return torch.amp.custom_fwd(fwd, device_type="rbln", cast_inputs=cast_inputs)


def custom_bwd(bwd=None):
    """`torch.amp.custom_bwd(device_type="rbln")`."""
    return torch.amp.custom_bwd(bwd, device_type="rbln")


def amp_definitely_not_available() -> bool:
    from .rbln import is_available

    return not is_available()
