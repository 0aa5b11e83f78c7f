"""Ops in dtypes only CUDA has (issue 30), on the device.

Model code branches on `device.type != "cpu"` and then relies on CUDA's
dtype support: transformers' MoE experts count tokens per expert with
`torch.histc` on int32 expert ids on every device but the CPU and MPS. The
CPU kernel rejects integer input ("histogram_cpu" not implemented for
'Int'), so the CPU fallback cannot run it; rbln runs it as a device program.
The same holds for every entry of docs/cuda-dtypes.md that CUDA runs and the
CPU kernel rejects: bool `abs` (the identity) and `trace` (the diagonal's
sum, int64), and float16/bfloat16 `avg_pool3d`, `multi_margin_loss`,
`multilabel_margin_loss` and `_upsample_bilinear2d_aa`, which CUDA computes
in float32 (opmath) and rounds once.

`histc_integer` is CUDA's integer histc (aten/src/ATen/native/cuda/
SummaryOps.cu) as ATen ops the compiler has: min/max truncated to integers,
the data's [amin, amax] when min == max, an empty range widened by 1 on each
side, bin = (e - min) * bins / (max - min) in int64 arithmetic (exact for
every int32/int64 id, where a float computation would round), e == max in
the last bin, elements outside the range skipped, counts in the input's
dtype. It serves both paths: compiled graphs decompose integer histc with it
(`_dynamo.capture.decompositions`), and eager calls run it as one compiled
graph program per input signature (`_device_programs`); a failure to
compile raises (there is no CPU kernel to fall back to). Float histc keeps
the compiler's native op (compiled) and the counted CPU fallback (eager).
Integer histc on a tensor that is not on rbln is not ours (the CPU rejects
it as before). The other ops work the same way (`_CUDA_ONLY`), except eager
bool `abs`, a device copy in rbln's C++ abs kernel (csrc/dispatch/
compiled_ops.cc: no Python kernel in front of every dtype's abs); compiled
graphs already decompose them into ops the compiler has, except bool `abs`
and `_upsample_bilinear2d_aa` (`decompositions()`).
"""

import torch

from . import _device_programs, _upsample_aa

_INTEGERS = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
_HALF = (torch.float16, torch.bfloat16)

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
    """`histc_integer` for x's signature, compiled once per (dtype, shape,
    bins, min, max)."""
    def fn(t):
        return (histc_integer(t, bins, lo, hi),)

    return _device_programs.program(
        ("histc", bins, lo, hi), fn, [x],
        lambda failure: (f"torch.histc of {x.dtype} on rbln: the device program failed to "
                         f"compile ({type(failure).__name__}: {failure}); the CPU has no integer "
                         f"histc to fall back to -- cast the input to float32 to use the CPU's "
                         f"histc"))


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


# -- the other ops CUDA runs in a dtype the CPU rejects ---------------------------


def _abs_bool(x):
    """CUDA's abs of bool: the identity (a copy)."""
    return x.clone()


def _trace_bool(x):
    """CUDA's trace (trace_cuda): the diagonal's sum, int64 for bool."""
    return (x.diagonal().sum(),)


def _opmath(op, outputs=1):
    """`op` on half inputs as CUDA computes it: the floating tensors in
    float32 (opmath), the results rounded once to the input's dtype."""
    def fn(x, *args, **kwargs):
        up = [a.float() if isinstance(a, torch.Tensor) and a.dtype in _HALF else a
              for a in args]
        got = op(x.float(), *up, **kwargs)
        got = got if isinstance(got, tuple) else (got,)
        return tuple(g.to(x.dtype) for g in got[:outputs])

    return fn


# op overload -> (dtypes CUDA takes and the CPU rejects, the tensor arguments'
# positions, CUDA's computation as ATen ops returning a tuple).
_CUDA_ONLY = {
    torch.ops.aten.trace.default: ((torch.bool,), (0,), _trace_bool),
    torch.ops.aten.avg_pool3d.default: (_HALF, (0,), _opmath(torch.ops.aten.avg_pool3d.default)),
    torch.ops.aten.multi_margin_loss.default: (
        _HALF, (0, 1, 4), _opmath(torch.ops.aten.multi_margin_loss.default)),
    torch.ops.aten.multilabel_margin_loss_forward.default: (
        _HALF, (0, 1), _opmath(torch.ops.aten.multilabel_margin_loss_forward.default, 2)),
    torch.ops.aten._upsample_bilinear2d_aa.default: (
        _HALF, (0,), _opmath(_upsample_aa.upsample_bilinear2d_aa)),
}


def _real_rbln(x):
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    return (type(x) is torch.Tensor and x.device.type == "rbln"
            and _get_current_dispatch_mode() is None)


def _with_autograd(op, *args, **kwargs):
    """`op` as it dispatched before our kernel: the autograd kernel
    (VariableType, registered at the Autograd alias key, which `_op_dk`
    calls directly), then rbln's compiled kernel or the counted CPU
    fallback below it."""
    return op._op_dk(torch._C.DispatchKey.Autograd, *args, **kwargs)


def _needs_grad(tensors):
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def _cuda_only_kernel(op):
    dtypes, positions, fn = _CUDA_ONLY[op]
    schema = op._schema.arguments

    def kernel(*args, **kwargs):
        # Every argument by position, defaults filled in from the schema.
        call = [args[i] if i < len(args) else
                kwargs[a.name] if a.name in kwargs else a.default_value
                for i, a in enumerate(schema)]
        x = call[0]
        tensors = [call[i] for i in positions]
        if x.dtype not in dtypes or not all(t is None or (_real_rbln(t) and t.device == x.device)
                                            for t in tensors):
            # Other dtypes, tracing, tensors of several devices: as before.
            return _with_autograd(op, *args, **kwargs)
        name = op._schema.name.split("::")[1]
        if _needs_grad(tensors):
            raise NotImplementedError(
                f"{name} of {x.dtype} on rbln with a gradient: rbln runs the forward as CUDA "
                f"does, but it has no backward in {x.dtype} and the CPU has no {x.dtype} kernel; "
                f"cast the input to float32 first")
        rest = [a for i, a in enumerate(call) if i not in positions]

        def program_fn(*ts):
            full, it, r = [], iter(ts), iter(rest)
            for i in range(len(call)):
                full.append(next(it) if i in positions else next(r))
            return fn(*full)

        key = (name, repr(rest))
        results = _device_programs.run(
            key, program_fn, tensors,
            lambda failure: (f"{name} of {x.dtype} on rbln: the device program failed to compile "
                             f"({type(failure).__name__}: {failure}); the CPU has no {x.dtype} "
                             f"kernel to fall back to -- cast the input to float32 first"))
        return results[0] if len(results) == 1 else tuple(results)

    return kernel


def _abs_decomposition(x):
    return _abs_bool(x) if x.dtype == torch.bool else NotImplemented


# Decompositions of one dtype of an op the compiler converts in the others
# (docs/compiler-op-coverage.md counts the op as compiled).
ONE_DTYPE_DECOMPOSITIONS = frozenset({torch.ops.aten.abs.default})


def decompositions():
    """Compiled graphs: the ops above the compiler lacks in these dtypes."""
    return {
        torch.ops.aten.histc.default: histc_integer,
        torch.ops.aten.abs.default: _abs_decomposition,
        torch.ops.aten._upsample_bilinear2d_aa.default: _upsample_aa.decomposition,
    }


def register():
    """Registers the kernels (once). They sit at rbln's autograd key: histc
    has no gradient, so float histc dispatches below it to the boxed CPU
    fallback, counted and governed as before; the other ops' calls in the
    dtypes CPU and rbln already run go through the autograd kernel they
    dispatched to before (`_with_autograd`)."""
    global _library
    if _library is not None:
        return
    _library = torch.library.Library("aten", "IMPL", "AutogradPrivateUse1")
    _library.impl("histc", _histc)
    _library.impl("histc.out", _histc_out)
    for op in _CUDA_ONLY:
        _library.impl(op._schema.name.split("::")[1] + (
            f".{op._schema.overload_name}" if op._schema.overload_name else ""),
            _cuda_only_kernel(op))


def clear():
    """Drops the compiled programs."""
    _device_programs.clear()
