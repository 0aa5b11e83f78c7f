"""torch._grouped_mm (F.grouped_mm) in eager mode on rbln (issue 30 item 2):
a device program, not the CPU fallback.

Each call runs the compiler's grouped GEMM (frontend/ops/grouped_matmul_ops.cc:
2-D x 3-D with offsets, 3-D x 2-D, 2-D x 2-D, 3-D x 3-D; each group's rows
multiplied by its own weight through oneDNN) as one compiled program per
signature (shapes, strides, dtypes), traced without Dynamo as
`_device_only_ops` and `_optim_kernels` do; the offsets are program data, so
one program serves every routing. The trace records `rbln::grouped_mm`, an
alias of the compiler's op (fx_to_ir), because ATen's meta kernel for
_grouped_mm takes only bfloat16 off the CPU while the kernel here, like the
CPU's, takes float32 and float16 too (transformers calls it with the model's
dtype in eager mode). The kernel sits at rbln's dispatch key
below autograd: ATen's derivative of _grouped_mm (itself _grouped_mm calls:
the transposed weight for the input's gradient, the 2-D x 2-D form for the
weight's) gives the backward on the device too. A failure to compile raises
(no silent CPU run).
"""

import threading

import torch

_lock = threading.Lock()
_programs = {}
_library = None


@torch.library.custom_op("rbln::grouped_mm", mutates_args=())
def _grouped_mm_op(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor | None = None,
                   out_dtype: torch.dtype | None = None) -> torch.Tensor:
    raise RuntimeError("rbln::grouped_mm only runs inside compiled rbln programs")


@_grouped_mm_op.register_fake
def _(a, b, offs=None, out_dtype=None):
    groups = offs.shape[0] if offs is not None else a.shape[0]
    if a.dim() == 2 and b.dim() == 2:
        shape = (groups, a.shape[0], b.shape[1])
    elif a.dim() == 3 and b.dim() == 3:
        shape = (a.shape[0], a.shape[1], b.shape[2])
    else:
        shape = (a.shape[-2], b.shape[-1])
    return a.new_empty(shape, dtype=out_dtype or a.dtype)


def _signature(t):
    return None if t is None else (tuple(t.shape), t.stride(), t.dtype)


def _program(a, b, offs, out_dtype):
    key = (_signature(a), _signature(b), _signature(offs), out_dtype, a.device)
    with _lock:
        compiled = _programs.get(key)
    if compiled is None:
        from torch.fx.experimental.proxy_tensor import make_fx

        from ._dynamo import backend

        args = [a, b] if offs is None else [a, b, offs]

        def fn(x, w, o=None):
            return (torch.ops.rbln.grouped_mm(x, w, o, out_dtype),)

        gm = make_fx(fn, tracing_mode="fake")(*args)
        compiled = backend.rbln_backend(gm, args, options={"host_ops": "none"})
        failure = getattr(compiled, "failure", None)
        if failure is not None:
            raise RuntimeError(
                f"torch._grouped_mm on rbln: the device program failed to compile "
                f"({type(failure).__name__}: {failure})") from failure
        with _lock:
            _programs.setdefault(key, compiled)
    return compiled


def _grouped_mm(self, mat2, offs=None, bias=None, out_dtype=None):
    torch._check(bias is None, lambda: "torch._grouped_mm: bias is not supported")
    args = [self, mat2] if offs is None else [self, mat2, offs]
    (out,) = _program(self, mat2, offs, out_dtype)(*args)
    return out


def register():
    """Registers the kernel (once) at rbln's key below autograd."""
    global _library
    if _library is not None:
        return
    _library = torch.library.Library("aten", "IMPL", "PrivateUse1")
    _library.impl("_grouped_mm", _grouped_mm)

