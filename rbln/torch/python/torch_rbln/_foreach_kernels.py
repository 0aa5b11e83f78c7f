"""torch's `_foreach_*` ops on rbln as one device program per call
signature (issue 29): the multi-tensor kernels of torch.optim (AdamW, Adam,
SGD, their capturable forms, clip_grad_norm_).

PyTorch runs a foreach op on a backend without a kernel of its own as one
op per tensor; eager compiled kernels compute the half types only (SPEC G1),
so a float32 optimizer step ran every op on the CPU. Here every overload of
the ops in `_MATH` is one kernel: its schema says which arguments are tensor
lists (one element per tensor), scalars (0-d float32 device inputs, so a
new learning rate reuses the program), scalar lists and 0-d / per-tensor
`Tensor` scalars; the per-tensor math is computed in float32 (opmath: half
inputs widened, one rounding at the end, as CUDA's multi-tensor kernels do)
for the whole list in one traced program, compiled once per (overload,
shapes and dtypes) by `_optim_kernels.run_program`. In-place overloads' programs
write `self` in place. Tensor lists of other dtypes (integers,
float64) or tensors of several devices take the counted CPU
fallback (`_optim_kernels.cpu_run`).
"""

import torch

from . import _optim_kernels

_FLOATS = (torch.float32, torch.float16, torch.bfloat16)


def _with_alpha(op):
    return lambda x, y, alpha=None: op(x, y if alpha is None else y * alpha)


# Per-tensor math on float32 tensors (scalars arrive as 0-d float32 tensors).
_MATH = {
    "add": _with_alpha(torch.add),
    "sub": _with_alpha(torch.sub),
    "mul": torch.mul,
    "div": torch.div,
    "maximum": torch.maximum,
    "minimum": torch.minimum,
    "clamp_min": torch.maximum,
    "clamp_max": torch.minimum,
    "pow": torch.pow,
    "lerp": torch.lerp,
    # CUDA's pointwise_op_scalar: self + value * t1 * t2, self + value * (t1 / t2).
    "addcmul": lambda x, a, b, value: x + value * a * b,
    "addcdiv": lambda x, a, b, value: x + value * (a / b),
    "sqrt": torch.sqrt,
    "neg": torch.neg,
    "reciprocal": torch.reciprocal,
    "abs": torch.abs,
    "exp": torch.exp,
    "log": torch.log,
    "sign": torch.sign,
    "sigmoid": torch.sigmoid,
    "copy": lambda x, src, non_blocking=False: src,
}


def _norm(x, ord):
    """linalg.vector_norm(x, ord) in float32 as the compiler's ops."""
    a = x.abs()
    if ord == float("inf"):
        return a.amax()
    if ord == 2:
        return (a * a).sum().sqrt()
    if ord == 1:
        return a.sum()
    return (a ** ord).sum() ** (1.0 / ord)


def _kinds(op):
    """The kind of each schema argument: "list" (Tensor[]), "scalar"
    (Scalar), "scalars" (Scalar[]), "tensor" (a Tensor scalar), "static"."""
    kinds = []
    for arg in op._schema.arguments:
        t = str(arg.type)
        kinds.append({"List[Tensor]": "list", "number": "scalar", "List[number]": "scalars",
                      "Tensor": "tensor"}.get(t, "static"))
    return kinds


def _bind(op, args, kwargs):
    """The value of every schema argument of `op` (defaults filled in)."""
    values = []
    for i, arg in enumerate(op._schema.arguments):
        if i < len(args):
            values.append(args[i])
        elif arg.name in kwargs:
            values.append(kwargs[arg.name])
        else:
            values.append(arg.default_value)
    return values


def _floats_only(lists):
    return all(t.dtype in _FLOATS for lst in lists for t in lst)


def _result_dtype(items, inplace):
    """The dtype of result i: self's for an in-place op (computed in float32
    and rounded once, as ATen's slow path with a wider operand), else the
    promotion of the list elements."""
    if inplace:
        return items[0].dtype
    dtype = items[0].dtype
    for t in items[1:]:
        dtype = torch.promote_types(dtype, t.dtype)
    return dtype


def _kernel(op, math, inplace):
    kinds = _kinds(op)
    names = [a.name for a in op._schema.arguments]
    name = op._schema.name + "." + (op._schema.overload_name or "default")
    is_norm = op._schema.name == "aten::_foreach_norm"

    def kernel(*args, **kwargs):
        values = _bind(op, args, kwargs)
        lists = [v for v, k in zip(values, kinds) if k == "list"]
        n = len(lists[0])
        device = _optim_kernels.device_of([t for lst in lists for t in lst])
        if n == 0:
            return None if inplace else []
        if device is None or not _floats_only(lists) or any(len(lst) != n for lst in lists):
            return _optim_kernels.cpu_run(op, *args, **kwargs)
        # Device inputs after the lists: scalars as 0-d float32, scalar lists
        # (and a per-tensor `Tensor scalars`) as 1-d float32; the rest static.
        extra, layout, static = [], [], {}
        for value, kind, arg_name in zip(values, kinds, names):
            if kind == "scalar" and not is_norm:
                extra.append(_optim_kernels.scalar(value, device))
                layout.append((arg_name, "0d"))
            elif kind == "scalars":
                extra.append(_optim_kernels.scalars(value, device))
                layout.append((arg_name, "1d"))
            elif kind == "tensor":
                per_tensor = value.dim() == 1 and value.numel() == n
                extra.append(value.to(device=device, dtype=torch.float32).reshape(
                    n if per_tensor else ()))
                layout.append((arg_name, "1d" if per_tensor else "0d"))
            elif kind != "list":
                static[arg_name] = value

        def update(*flat):
            tensor_lists = [flat[j * n:(j + 1) * n] for j in range(len(lists))]
            inputs = dict(zip([a for a, _ in layout], flat[len(lists) * n:]))
            out = []
            for i in range(n):
                operands, keywords, lst = [], {}, iter(tensor_lists)
                for arg_name, kind in zip(names, kinds):
                    if kind == "list":
                        value = next(lst)[i].float()
                    elif arg_name in inputs:
                        form = dict(layout)[arg_name]
                        value = inputs[arg_name][i] if form == "1d" else inputs[arg_name]
                    else:
                        value = static[arg_name]
                    if arg_name in _KEYWORDS or kind == "static":
                        keywords[arg_name] = value
                    else:
                        operands.append(value)
                dtype = _result_dtype([lst[i] for lst in tensor_lists], inplace)
                if is_norm:
                    result = _norm(operands[0], float(static["ord"]))
                    dtype = keywords["dtype"] or dtype
                else:
                    result = math(*operands, **keywords)
                out.append(result.to(dtype))
            return tuple(out)

        flat = [t for lst in lists for t in lst] + extra
        key = (name, tuple(sorted((k, repr(v)) for k, v in static.items())), tuple(layout))
        if inplace:
            _optim_kernels.run_program(key, update, flat, writes=range(n))
            return None
        return list(_optim_kernels.run_program(key, update, flat))

    return kernel


# Scalar arguments passed by keyword to the per-tensor math.
_KEYWORDS = ("alpha", "non_blocking")


def kernels():
    """{overload name: kernel} for every overload of the ops in `_MATH`."""
    out = {}
    for base in list(_MATH) + ["norm"]:
        for suffix in ("", "_"):
            packet = getattr(torch.ops.aten, f"_foreach_{base}{suffix}", None)
            if packet is None:
                continue
            for overload in packet.overloads():
                op = getattr(packet, overload)
                if op._schema.returns and suffix == "_":
                    continue  # not an in-place overload
                if "out" in overload:
                    continue  # out= overloads
                out[f"_foreach_{base}{suffix}.{overload}"] = _kernel(
                    op, _MATH.get(base), inplace=suffix == "_")
    return out
