"""Fake-tensor results that follow rbln's ATen semantics, which are the CPU's.

Dynamo traces with fake tensors on the rbln device, and a few of PyTorch's
meta functions give results whose dtype depends on the device type: they
follow the CPU kernel only for "cpu" (and "mtia"), and CUDA's otherwise. rbln
runs ATen's CPU semantics (its eager ops that are not compiled run the CPU's
kernels), so a compiled graph must give what the CPU gives:

  * native_layer_norm: mean and rstd have the input's dtype on the CPU (the
    CUDA kernel keeps them in float32), see `torch._refs.native_layer_norm`.
"""

import torch
from torch._subclasses import fake_impls

_aten = torch.ops.aten
_installed = False


def _native_layer_norm(fake_mode, func, *args, **kwargs):
    out, mean, rstd = _original_native_layer_norm(fake_mode, func, *args, **kwargs)
    x = args[0] if args else kwargs["input"]
    if x.device.type == "rbln" and mean.dtype != x.dtype:
        mean = mean.to(x.dtype)
        rstd = rstd.to(x.dtype)
    return out, mean, rstd


_original_native_layer_norm = None


def install():
    """Replaces the fake implementations above (once per process)."""
    global _installed, _original_native_layer_norm
    if _installed:
        return
    _original_native_layer_norm = fake_impls.op_implementations_dict[
        _aten.native_layer_norm.default
    ]
    fake_impls.op_implementations_dict[_aten.native_layer_norm.default] = _native_layer_norm
    _installed = True
