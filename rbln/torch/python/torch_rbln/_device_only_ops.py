"""Ops in dtypes only CUDA has (issue 30): integer `histc` on the device.

Model code branches on `device.type != "cpu"` and then relies on CUDA's
dtype support: transformers' MoE experts count tokens per expert with
`torch.histc` on int32 expert ids on every device but the CPU and MPS. The
CPU kernel rejects integer input ("histogram_cpu" not implemented for
'Int'), so the CPU fallback cannot run it; rbln runs it as a device program.

`histc_integer` is CUDA's integer histc (aten/src/ATen/native/cuda/
SummaryOps.cu) as ATen ops the compiler has: min/max truncated to integers,
the data's [amin, amax] when min == max, an empty range widened by 1 on each
side, bin = (e - min) * bins / (max - min) in int64 arithmetic (exact for
every int32/int64 id, where a float computation would round), e == max in
the last bin, elements outside the range skipped, counts in the input's
dtype. It serves both paths: compiled graphs decompose integer histc with it
(`_dynamo.capture.decompositions`), and eager calls run it as one compiled
graph program per input signature (no Dynamo, as `_optim_kernels`); a
failure to compile raises (there is no CPU kernel to fall back to). Float
histc keeps the compiler's native op (compiled) and the counted CPU fallback
(eager). Integer histc on a tensor that is not on rbln is not ours (the CPU
rejects it as before).
"""

import threading

import torch

_INTEGERS = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)

_lock = threading.Lock()
_programs = {}  # (dtype, shape, bins, min, max) -> compiled program
_library = None


def _check_range(bins, lo, hi):
    torch._check(bins > 0, lambda: f"torch.histc(): bins must be > 0, but got {bins}")
    torch._check(lo <= hi, lambda: "torch.histc(): max must be larger than min")


def histc_integer(x, bins=100, min=0, max=0):
    """CUDA's histc of an integer tensor `x` (see the module doc), as ATen
    ops; NotImplemented for other dtypes (decomposition-table protocol)."""
    if x.dtype not in _INTEGERS:
        return NotImplemented
    lo, hi = int(min), int(max)  # CUDA: Scalar.to<int64_t>, truncating
    _check_range(bins, lo, hi)
    v = x.reshape(-1).to(torch.int64)
    if lo == hi and v.numel() > 0:
        data_lo, data_hi = v.amin(), v.amax()
        same = data_lo == data_hi
        left = torch.where(same, data_lo - 1, data_lo)
        right = torch.where(same, data_hi + 1, data_hi)
        width = right - left
    else:
        if lo == hi:
            lo, hi = lo - 1, hi + 1
        left, right, width = lo, hi, hi - lo
    inside = (v >= left) & (v <= right)
    # (e - left) >= 0 where inside, so floor division is CUDA's truncation.
    b = torch.div((v - left) * bins, width, rounding_mode="floor").clamp(max=bins - 1)
    b = torch.where(inside, b, bins)  # skipped elements count into bin `bins`
    counts = v.new_zeros(bins + 1).scatter_add(0, b, torch.ones_like(b))
    return counts[:bins].to(x.dtype)


def _program(x, bins, lo, hi):
    """`histc_integer` for x's signature, traced to ATen and compiled by the
    rbln backend once per (dtype, shape, bins, min, max)."""
    key = (x.dtype, tuple(x.shape), x.device, bins, lo, hi)
    with _lock:
        compiled = _programs.get(key)
    if compiled is None:
        from torch.fx.experimental.proxy_tensor import make_fx

        from ._dynamo import backend

        def fn(t):
            return (histc_integer(t, bins, lo, hi),)

        gm = make_fx(fn, tracing_mode="fake")(x)
        # One device program (no host ops); no silent CPU run if it fails.
        compiled = backend.rbln_backend(gm, [x], options={"host_ops": "none"})
        failure = getattr(compiled, "failure", None)
        if failure is not None:
            raise RuntimeError(
                f"torch.histc of {x.dtype} on rbln: the device program failed to compile "
                f"({type(failure).__name__}: {failure}); the CPU has no integer histc to fall "
                f"back to -- cast the input to float32 to use the CPU's histc") from failure
        with _lock:
            _programs.setdefault(key, compiled)
    return compiled


def _below_autograd(op, *args, **kwargs):
    """`op` as it dispatched before (float histc: the counted CPU fallback)."""
    with torch._C._AutoDispatchBelowAutograd():
        return op(*args, **kwargs)


def _ours(x):
    """Whether an integer histc of `x` runs as our program: a real rbln
    tensor outside any tracing (fake, functional and proxy tensors dispatch on
    to the decomposition / meta kernel)."""
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    return (x.dtype in _INTEGERS and type(x) is torch.Tensor
            and _get_current_dispatch_mode() is None)


def _histc(self, bins=100, min=0, max=0):
    if not _ours(self):
        return _below_autograd(torch.ops.aten.histc.default, self, bins, min, max)
    _check_range(bins, int(min), int(max))
    x = self.contiguous()
    (out,) = _program(x, bins, min, max)(x)
    return out


def _histc_out(self, bins=100, min=0, max=0, *, out):
    if not _ours(self):
        return _below_autograd(torch.ops.aten.histc.out, self, bins, min, max, out=out)
    torch._check(out.dtype == self.dtype,
                 lambda: f"torch.histc: out has dtype {out.dtype}, the input {self.dtype}")
    result = _histc(self, bins, min, max)
    if out.shape != result.shape:
        out.resize_(result.shape)
    out.copy_(result)
    return out


def register():
    """Registers the kernels (once). They sit at rbln's autograd key (histc
    has no gradient), so that float histc still dispatches to the boxed CPU
    fallback below it, counted and governed as before."""
    global _library
    if _library is not None:
        return
    _library = torch.library.Library("aten", "IMPL", "AutogradPrivateUse1")
    _library.impl("histc", _histc)
    _library.impl("histc.out", _histc_out)


def clear():
    """Drops the compiled programs."""
    with _lock:
        _programs.clear()
