"""Fake-tensor results that follow rbln's ATen semantics, which are the CPU's.

Dynamo traces with fake tensors on the rbln device, and a few of PyTorch's
meta functions give results whose dtype depends on the device type: they
follow the CPU kernel only for "cpu" (and "mtia"), and CUDA's otherwise. rbln
runs ATen's CPU semantics (its eager ops that are not compiled run the CPU's
kernels), so a compiled graph must give what the CPU gives:

  * native_layer_norm: mean and rstd have the input's dtype on the CPU (the
    CUDA kernel keeps them in float32), see `torch._refs.native_layer_norm`.
  * batch norm (every ATen form goes through
    `torch._decomp.decompositions.native_batch_norm_helper`): the CPU kernel
    saves mean/invstd in the input's dtype, float32 when a half input comes
    with float32 parameters or running stats; in evaluation it saves empty
    tensors; new running stats keep the running stats' dtype.
"""

import functools

import torch
import torch._decomp.decompositions as _decompositions
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


def _cpu_batch_norm_results(helper):
    """`native_batch_norm_helper` with the CPU kernel's saved statistics for
    rbln inputs (module docstring). Keeps the helper's name and module: fake
    tensor mode runs only torch._decomp's own decompositions."""

    @functools.wraps(helper)
    def wrapped(input, weight, bias, running_mean, running_var, training, momentum, eps,
                functional):
        output, save_mean, save_rstd, new_mean, new_var = helper(
            input, weight, bias, running_mean, running_var, training, momentum, eps, functional)
        if input.device.type != "rbln":
            return output, save_mean, save_rstd, new_mean, new_var
        params = [t for t in (weight, bias, running_mean, running_var) if t is not None]
        mixed = input.dtype in (torch.float16, torch.bfloat16) and any(
            p.dtype == torch.float32 for p in params)
        stat_dtype = torch.float32 if mixed else input.dtype
        if training:
            save_mean, save_rstd = save_mean.to(stat_dtype), save_rstd.to(stat_dtype)
        else:
            save_mean = input.new_zeros((0,), dtype=stat_dtype)
            save_rstd = input.new_zeros((0,), dtype=stat_dtype)
        if new_mean is not None and running_mean is not None:
            new_mean = new_mean.to(running_mean.dtype)
        if new_var is not None and running_var is not None:
            new_var = new_var.to(running_var.dtype)
        return output, save_mean, save_rstd, new_mean, new_var

    return wrapped


def install():
    """Replaces the fake implementations above (once per process)."""
    global _installed, _original_native_layer_norm
    if _installed:
        return
    _original_native_layer_norm = fake_impls.op_implementations_dict[
        _aten.native_layer_norm.default
    ]
    fake_impls.op_implementations_dict[_aten.native_layer_norm.default] = _native_layer_norm
    _decompositions.native_batch_norm_helper = _cpu_batch_norm_results(
        _decompositions.native_batch_norm_helper)
    _installed = True
