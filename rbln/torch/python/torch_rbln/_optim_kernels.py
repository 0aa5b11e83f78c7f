"""Optimizer steps on rbln (issue 29): torch.optim's multi-tensor kernels
-- the `_foreach_*` ops (`_foreach_kernels`) and the fused Adam/AdamW/SGD
kernels (here) -- as compiled device programs over the whole tensor list.

Eager compiled kernels compute the half types only (SPEC G1; a float32 op
falls back to the CPU by H1's dtype check), and PyTorch runs a foreach op on
a backend without kernels of its own as one op per tensor: an eager float32
AdamW step of a small GPT-2 ran 168 ops on the CPU, downloading every
parameter, gradient and moment. Here each kernel is one function of
per-tensor ATen ops in float32 (opmath: half types widened, one rounding),
traced and compiled by the rbln backend once per kernel and list of shapes
and dtypes (`_device_programs`, no host ops). Scalars (learning rate, betas,
step sizes) are 0-d float32 device tensors, inputs of the program, so a
changing learning rate reuses it. Results are written back into the
tensors, as the in-place ops promise.

Fused kernels follow ATen's CPU/CUDA kernels (FusedAdamKernel, FusedSGDKernel):
a `grad_scale` divides the gradient, which is stored back unscaled; a
`found_inf` of 1.0 leaves every tensor untouched. A list holding tensors of
several devices or dtypes other than float32/float16/bfloat16 goes to the
CPU, visibly (dispatch/cpu_fallback, `cpu_run`).
"""

import collections
import os

import torch

from . import _C, _device_programs

_FLOATS = (torch.float32, torch.float16, torch.bfloat16)
_library = None


def run_program(key, fn, tensors, writes=None):
    """`fn(*tensors)` (it returns a tuple) as one device program, compiled
    once per key and signature of `tensors`; its results. With `writes`
    (for each result, the index of the input it replaces) the program
    writes the results into those inputs in place (an input update, as a
    compiled graph's mutated KV cache) and returns nothing: no copy per
    tensor after the run."""
    def failure(e):
        return (f"rbln: the optimizer kernel {key[0]} did not compile for the device ({e}); "
                "please report it with the optimizer and parameter shapes")

    dense = [_dense(t) for t in tensors]
    if writes is not None and _shares_storage(dense, writes):
        # A program updates an input in place only if no other input
        # overlaps it (`_foreach_add_(xs, xs)`, views of one buffer): results
        # are copied back instead.
        write_back([tensors[i] for i in writes], run_program(key, fn, tensors))
        return None
    if writes is None:
        return _device_programs.run(("optim",) + tuple(key), fn, dense, failure)

    def update(*args):
        for i, result in zip(writes, fn(*args)):
            args[i].copy_(result)
        return ()

    _device_programs.run(("optim", "in place") + tuple(key), update, dense, failure)
    # An input that had to be made dense was updated as a copy.
    for i in writes:
        if dense[i] is not tensors[i] and dense[i].data_ptr() != tensors[i].data_ptr():
            write_back([tensors[i]], [dense[i]])
    return None


def _shares_storage(tensors, writes):
    """Whether an input in `writes` shares its storage with another input."""
    storages = [t.untyped_storage().data_ptr() for t in tensors]
    uses = collections.Counter(storages)
    return any(uses[storages[i]] > 1 for i in writes)


def _dense(t):
    """`t` with row-major strides: contiguous tensors may carry any stride
    on a size-1 dimension (a depthwise convolution's weight gradient does),
    which the traced program would copy as a strided view."""
    t = t.contiguous()
    return t if t.dim() == 0 or t.stride() == _row_major(t.shape) else t.view(-1).view(t.shape)


def _row_major(shape):
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


def device_of(tensors):
    """The rbln device of every tensor in `tensors`, or None if they are not
    all on one rbln device."""
    device = None
    for t in tensors:
        if not isinstance(t, torch.Tensor) or t.device.type != "rbln":
            return None
        if device is None:
            device = t.device
        elif t.device != device:
            return None
    return device


def scalar(value, device):
    """A Python number (or 1-element tensor) as a 0-d float32 tensor on `device`."""
    if isinstance(value, torch.Tensor):
        return value.to(device=device, dtype=torch.float32).reshape(())
    return torch.tensor(float(value), dtype=torch.float32, device=device)


def scalars(values, device):
    return torch.tensor([float(v) for v in values], dtype=torch.float32, device=device)


def write_back(targets, results):
    with torch.no_grad():
        for t, r in zip(targets, results):
            t.copy_(r)


def _f(t):
    return t.float()


def _unscale(grads, grad_scale):
    return [g if grad_scale is None else g / grad_scale for g in grads]


def _skip_if_found_inf(found_inf, new, old):
    """`new` unless `found_inf` is 1.0 (ATen's fused kernels return early)."""
    if found_inf is None:
        return new
    skip = found_inf == 1.0
    return [torch.where(skip, o, n) for n, o in zip(new, old)]


def _adam_update(params, grads, exp_avgs, exp_avg_sqs, max_sqs, steps, lr, beta1, beta2,
                 weight_decay, eps, decoupled, amsgrad, maximize):
    """ATen's fused Adam/AdamW (FusedAdamKernel.cpp) per parameter, in
    float32 on unscaled float32 gradients: the new (param, exp_avg,
    exp_avg_sq[, max_exp_avg_sq]) of every parameter, flat."""
    out = []
    for i, (p, gf, m, v) in enumerate(zip(params, grads, exp_avgs, exp_avg_sqs)):
        pf, mf, vf = _f(p), _f(m), _f(v)
        if maximize:
            gf = -gf
        if decoupled:
            pf = pf * (1 - lr * weight_decay)
        else:
            gf = gf + weight_decay * pf
        mf = torch.lerp(mf, gf, 1 - beta1)
        vf = vf * beta2 + (1 - beta2) * gf * gf
        step = _f(steps[i])
        bias1 = 1 - torch.pow(beta1, step)
        bias2 = 1 - torch.pow(beta2, step)
        step_size = lr / bias1
        if amsgrad:
            mx = torch.maximum(_f(max_sqs[i]), vf)
            denom = mx.sqrt() / bias2.sqrt() + eps
        else:
            mx = None
            denom = vf.sqrt() / bias2.sqrt() + eps
        pf = pf - step_size * mf / denom
        out += [pf, mf, vf] + ([] if mx is None else [mx])
    return out


def _sgd_update(params, grads, bufs, lr, weight_decay, momentum, dampening, nesterov, maximize,
                is_first_step):
    """ATen's fused SGD (FusedSGDKernel.cpp) per parameter, in float32 on
    unscaled float32 gradients: the new (param[, momentum_buffer]), flat.
    `weight_decay` is None when it is 0 (ATen skips the term)."""
    out = []
    for i, (p, g) in enumerate(zip(params, grads)):
        pf = _f(p)
        if maximize:
            g = -g
        if weight_decay is not None:
            g = g + weight_decay * pf
        if bufs:
            buf = g if is_first_step else momentum * _f(bufs[i]) + (1 - dampening) * g
            g = g + momentum * buf if nesterov else buf
        out += [pf - lr * g] + ([buf] if bufs else [])
    return out


def _fused(op, kind):
    """The rbln kernel of a fused optimizer overload `op` ("adam", "adamw", "sgd")."""
    names = [a.name for a in op._schema.arguments]
    n_lists = 6 if kind != "sgd" else 3

    def kernel(*args, **kwargs):
        values = dict(zip(names, args))
        values.update(kwargs)
        lists = [values[n] for n in names[:n_lists]]
        grad_scale, found_inf = values.get("grad_scale"), values.get("found_inf")
        if kind == "sgd":
            active = [lst for lst in lists if len(lst)]
            flags = ("nesterov", "maximize", "is_first_step")
            numbers = ("lr", "weight_decay", "momentum", "dampening")
        else:
            active = lists if values["amsgrad"] else lists[:4] + lists[5:]
            flags = ("amsgrad", "maximize")
            numbers = ("lr", "beta1", "beta2", "weight_decay", "eps")
        tensors = [t for lst in active for t in lst]
        device = device_of(tensors + [t for t in (grad_scale, found_inf) if t is not None])
        dtypes_ok = all(t.dtype in _FLOATS for t in tensors)
        if device is None or not dtypes_ok:
            return cpu_run(op, *args, **kwargs)
        # The ATen kernels compare weight_decay/momentum with 0 to pick a
        # path; they are static, the rest are 0-d device inputs.
        static = {f: bool(values[f]) for f in flags}
        if kind == "sgd":
            static.update(weight_decay=values["weight_decay"] != 0, has_bufs=bool(lists[2]))
        extra = [scalar(values[x], device) for x in numbers]
        extra += [t.reshape(()) for t in (grad_scale, found_inf) if t is not None]
        lengths = [len(lst) for lst in active]
        mutated = _mutated(kind, active, static)

        def update(*flat):
            parts, at = [], 0
            for n in lengths:
                parts.append(list(flat[at:at + n]))
                at += n
            nums = dict(zip(numbers, flat[at:at + len(numbers)]))
            at += len(numbers)
            gs = flat[at] if grad_scale is not None else None
            fi = flat[-1] if found_inf is not None else None
            grads = _unscale([_f(g) for g in parts[1]], gs)
            if kind == "sgd":
                new = _sgd_update(parts[0], grads, parts[2] if static["has_bufs"] else [],
                                  nums["lr"], nums["weight_decay"] if static["weight_decay"] else None,
                                  nums["momentum"], nums["dampening"], static["nesterov"],
                                  static["maximize"], static["is_first_step"])
            else:
                mx = parts[4] if static["amsgrad"] else []
                new = _adam_update(parts[0], grads, parts[2], parts[3], mx, parts[-1],
                                   nums["lr"], nums["beta1"], nums["beta2"], nums["weight_decay"],
                                   nums["eps"], kind == "adamw", static["amsgrad"],
                                   static["maximize"])
            written = _mutated(kind, parts, static)
            if gs is not None:
                new += grads  # stored back unscaled, as ATen does
                written += parts[1]
            new = _skip_if_found_inf(fi, new, [_f(t) for t in written])
            return tuple(r.to(t.dtype) for r, t in zip(new, written))

        key = (op._schema.name, tuple(sorted(static.items())), grad_scale is not None,
               found_inf is not None, tuple(lengths))
        targets = mutated + (list(lists[1]) if grad_scale is not None else [])
        index = {id(t): i for i, t in enumerate(tensors)}
        run_program(key, update, tensors + extra, writes=[index[id(t)] for t in targets])

    return kernel


def _mutated(kind, lists, static):
    """The tensors a fused kernel writes, in its update's order (the
    gradients, written when unscaled, come last)."""
    out = []
    if kind == "sgd":
        for i, p in enumerate(lists[0]):
            out += [p] + ([lists[2][i]] if static["has_bufs"] else [])
        return out
    for i, p in enumerate(lists[0]):
        out += [p, lists[2][i], lists[3][i]] + ([lists[4][i]] if static["amsgrad"] else [])
    return out


def cpu_run(op, *args, **kwargs):
    """The CPU fallback of the cases the compiled kernels do not take (lists
    with tensors of several devices or dtypes other than float32/float16/
    bfloat16): `op` on CPU copies of
    the rbln tensors, mutated ones written back; counted and governed as the
    boxed fallback is (dispatch/cpu_fallback, TORCH_RBLN_DISABLE_FALLBACK=
    unsupported_op)."""
    name = op._schema.name
    disabled = {c.strip() for c in os.environ.get("TORCH_RBLN_DISABLE_FALLBACK", "").split(",")}
    if disabled & {"unsupported_op", "all"}:
        raise RuntimeError(
            f"rbln: `{name}` would run on the CPU (these arguments have no rbln kernel: tensors "
            "of several devices, or of dtypes other than float32/float16/bfloat16) and "
            "TORCH_RBLN_DISABLE_FALLBACK disables unsupported_op fallbacks; remove unsupported_op "
            "from it to allow the CPU run")
    _C._counter_add("dispatch/cpu_fallback", 1)
    _C._counter_add(f"dispatch/cpu_fallback/{name}", 1)
    def to_cpu(x):
        if isinstance(x, torch.Tensor) and x.device.type == "rbln":
            return x.cpu()
        if isinstance(x, (list, tuple)):
            return type(x)(to_cpu(y) for y in x)
        return x

    cpu_args = to_cpu(list(args))
    cpu_kwargs = {k: to_cpu(v) for k, v in kwargs.items()}
    out = op(*cpu_args, **cpu_kwargs)

    def back(dev, host):
        if isinstance(dev, torch.Tensor) and dev.device.type == "rbln":
            with torch.no_grad():
                dev.copy_(host)
        elif isinstance(dev, (list, tuple)):
            for d, h in zip(dev, host):
                back(d, h)

    for dev, host in zip(args, cpu_args):
        back(dev, host)
    return out


def register():
    """Registers the kernels for rbln (once)."""
    global _library
    if _library is not None:
        return
    from . import _foreach_kernels

    _library = torch.library.Library("aten", "IMPL", "PrivateUse1")
    kernels = _foreach_kernels.kernels()
    for base, kind in (("_fused_adamw_", "adamw"), ("_fused_adam_", "adam"),
                       ("_fused_sgd_", "sgd")):
        for overload in ("default", "tensor_lr"):
            kernels[f"{base}.{overload}"] = _fused(getattr(getattr(torch.ops.aten, base), overload),
                                                   kind)
    for name, kernel in kernels.items():
        _library.impl(name.removesuffix(".default"), kernel)
