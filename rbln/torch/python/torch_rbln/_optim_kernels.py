"""Optimizer steps on rbln (issue 29): the foreach ops of torch.optim's
multi-tensor optimizers (AdamW, Adam, SGD's default on rbln) and the fused
AdamW/Adam kernels, as compiled programs over the whole list of tensors.

Eager compiled kernels compute the half types only (SPEC G1; a float32 op
falls back to the CPU by H1's dtype check), and PyTorch runs a foreach op on
a backend without kernels of its own as one op per tensor: an eager float32
AdamW step ran ~170 ops on the CPU, downloading every parameter, gradient and
moment. Here each foreach op -- and the fused kernels -- is one function of
per-tensor torch ops, traced into an ATen graph and compiled by the rbln
backend (graph programs compute float32), one program per list of shapes
and dtypes. The
scalars (learning rate, betas, step sizes) are 0-d device tensors, inputs of
the program, so a changing learning rate reuses it. Results are written back
into the tensors, as the in-place ops promise.

A list holding tensors of other devices, or a fused call with gradient
scaling (grad_scale / found_inf), goes to the boxed CPU fallback as before,
visibly (dispatch/cpu_fallback)."""

import os
import threading

import torch

from . import _C

_lock = threading.Lock()
# (kernel name, list lengths, (shape, dtype) of every tensor) -> program.
_programs = {}
_library = None


def _program(name, fn, lists, extra):
    """`fn(*lists, *extra)` traced into an ATen graph and compiled by the rbln
    backend, once per kernel and signature (no Dynamo: its guards would cost
    every call, and its recompile limit would stop a process that steps
    many models)."""
    flat = [t for lst in lists for t in lst] + list(extra)
    key = (name, tuple(len(lst) for lst in lists),
           tuple((tuple(t.shape), t.dtype) for t in flat))
    with _lock:
        compiled = _programs.get(key)
    if compiled is None:
        from torch.fx.experimental.proxy_tensor import make_fx

        from ._dynamo.backend import rbln_backend

        lengths = [len(lst) for lst in lists]

        def flat_fn(*args):
            out, at = [], 0
            for n in lengths:
                out.append(list(args[at:at + n]))
                at += n
            return fn(*out, *args[at:])

        gm = make_fx(flat_fn, tracing_mode="fake")(*flat)
        compiled = rbln_backend(gm, flat)
        with _lock:
            _programs[key] = compiled
    return compiled(*flat)


def _device_of(tensors):
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


def _scalar(value, device):
    """A Python number (or 0-d tensor) as a 0-d float32 tensor on `device`."""
    if isinstance(value, torch.Tensor):
        return value.to(device=device, dtype=torch.float32).reshape(())
    return torch.tensor(float(value), dtype=torch.float32, device=device)


def _scalars(values, device):
    return torch.tensor([float(v) for v in values], dtype=torch.float32, device=device)


def _apply(name, fn, lists, *extra):
    """Runs compiled `fn(*lists, *extra)` (it returns one list of results);
    None if the lists are not all on one rbln device."""
    device = _device_of([t for lst in lists for t in lst])
    if device is None:
        return None
    return _program(name, fn, lists, [e(device) for e in extra])


def _write_back(targets, results):
    with torch.no_grad():
        for t, r in zip(targets, results):
            t.copy_(r)


# -- per-tensor math (opmath: float32 for the half types, one rounding) ----------

def _f(t):
    return t.float()


def _add_scalar(xs, s):
    return [(_f(x) + s).to(x.dtype) for x in xs]


def _add_list(xs, ys, alpha):
    return [(_f(x) + _f(y) * alpha).to(x.dtype) for x, y in zip(xs, ys)]


def _mul_scalar(xs, s):
    return [(_f(x) * s).to(x.dtype) for x in xs]


def _mul_list(xs, ys):
    return [(_f(x) * _f(y)).to(x.dtype) for x, y in zip(xs, ys)]


def _div_scalar(xs, s):
    return [(_f(x) / s).to(x.dtype) for x in xs]


def _div_scalar_list(xs, s):
    return [(_f(x) / s[i]).to(x.dtype) for i, x in enumerate(xs)]


def _lerp_scalar(xs, ends, w):
    return [torch.lerp(_f(x), _f(e), w).to(x.dtype) for x, e in zip(xs, ends)]


def _addcmul_scalar(xs, t1, t2, v):
    return [(_f(x) + v * _f(a) * _f(b)).to(x.dtype) for x, a, b in zip(xs, t1, t2)]


def _addcdiv_scalar(xs, t1, t2, v):
    return [(_f(x) + v * (_f(a) / _f(b))).to(x.dtype) for x, a, b in zip(xs, t1, t2)]


def _addcdiv_scalar_list(xs, t1, t2, v):
    return [(_f(x) + v[i] * (_f(a) / _f(b))).to(x.dtype)
            for i, (x, a, b) in enumerate(zip(xs, t1, t2))]


def _maximum_list(xs, ys):
    return [torch.maximum(x, y) for x, y in zip(xs, ys)]


def _sqrt(xs):
    return [_f(x).sqrt().to(x.dtype) for x in xs]


def _neg(xs):
    return [-x for x in xs]


def _adam_update(params, grads, exp_avgs, exp_avg_sqs, max_sqs, steps, lr, beta1, beta2,
                 weight_decay, eps, decoupled, amsgrad, maximize):
    """ATen's fused Adam/AdamW (FusedAdamKernel.cpp) per parameter, in
    float32: the new (param, exp_avg, exp_avg_sq, max_exp_avg_sq)."""
    out = []
    for i, (p, g, m, v) in enumerate(zip(params, grads, exp_avgs, exp_avg_sqs)):
        pf, gf, mf, vf = _f(p), _f(g), _f(m), _f(v)
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
        out.append((pf.to(p.dtype), mf.to(m.dtype), vf.to(v.dtype),
                    None if mx is None else mx.to(max_sqs[i].dtype)))
    return [t for group in out for t in group if t is not None]


def _fused_adam(decoupled):
    def kernel(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *, lr,
               beta1, beta2, weight_decay, eps, amsgrad, maximize, grad_scale=None,
               found_inf=None):
        if grad_scale is not None or found_inf is not None:
            return _cpu_run(kernel.op, self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs,
                             state_steps, lr=lr, beta1=beta1, beta2=beta2,
                             weight_decay=weight_decay, eps=eps, amsgrad=amsgrad,
                             maximize=maximize, grad_scale=grad_scale, found_inf=found_inf)
        lists = [self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs if amsgrad else [],
                 state_steps]
        name = f"fused_adam{'w' if decoupled else ''}_{int(amsgrad)}{int(maximize)}"

        def update(params, g, m, v, mx, steps, lr_, b1, b2, wd, e):
            return _adam_update(params, g, m, v, mx, steps, lr_, b1, b2, wd, e, decoupled,
                                amsgrad, maximize)

        results = _apply(name, update, lists, *(lambda d, x=x: _scalar(x, d) for x in
                                                (lr, beta1, beta2, weight_decay, eps)))
        if results is None:
            return _cpu_run(kernel.op, self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs,
                             state_steps, lr=lr, beta1=beta1, beta2=beta2,
                             weight_decay=weight_decay, eps=eps, amsgrad=amsgrad,
                             maximize=maximize)
        per = 4 if amsgrad else 3
        targets = []
        for i in range(len(self)):
            targets += [self[i], exp_avgs[i], exp_avg_sqs[i]]
            if amsgrad:
                targets.append(max_exp_avg_sqs[i])
        assert len(targets) == per * len(self) == len(results)
        _write_back(targets, results)

    return kernel


def _cpu_run(op, *args, **kwargs):
    """The CPU fallback of the cases the compiled kernels do not take (a list
    with tensors of other devices, gradient scaling): `op` on CPU copies of
    the rbln tensors, mutated ones written back; counted and governed as the
    boxed fallback is (dispatch/cpu_fallback, TORCH_RBLN_DISABLE_FALLBACK=
    unsupported_op)."""
    name = op._schema.name
    disabled = {c.strip() for c in os.environ.get("TORCH_RBLN_DISABLE_FALLBACK", "").split(",")}
    if disabled & {"unsupported_op", "all"}:
        raise RuntimeError(
            f"rbln: `{name}` would run on the CPU (these arguments have no rbln kernel: tensors "
            "of several devices, or gradient scaling in a fused optimizer) and "
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


# -- the foreach ops ---------------------------------------------------------------

def _inplace(name, fn, *scalar_args):
    """A foreach in-place op whose first argument is the list written."""
    def kernel(self, *args):
        tensor_lists = [self] + [a for a in args[:len(args) - len(scalar_args)]]
        scalars = args[len(args) - len(scalar_args):]
        extra = [(lambda d, s=s, kind=k: _scalars(s, d) if kind == "list" else _scalar(s, d))
                 for s, k in zip(scalars, scalar_args)]
        results = _apply(name, fn, tensor_lists, *extra)
        if results is None:
            return _cpu_run(kernel.op, self, *args)
        _write_back(self, results)

    return kernel


_OPS = {
    "_foreach_add_.Scalar": lambda: _inplace("add_scalar", _add_scalar, "scalar"),
    "_foreach_mul_.Scalar": lambda: _inplace("mul_scalar", _mul_scalar, "scalar"),
    "_foreach_mul_.Tensor": lambda: _inplace("mul_scalar", _mul_scalar, "scalar"),
    "_foreach_mul_.List": lambda: _inplace("mul_list", _mul_list),
    "_foreach_div_.Scalar": lambda: _inplace("div_scalar", _div_scalar, "scalar"),
    "_foreach_div_.ScalarList": lambda: _inplace("div_scalar_list", _div_scalar_list, "list"),
    "_foreach_lerp_.Scalar": lambda: _inplace("lerp_scalar", _lerp_scalar, "scalar"),
    "_foreach_addcmul_.Scalar": lambda: _inplace("addcmul_scalar", _addcmul_scalar, "scalar"),
    "_foreach_addcdiv_.Scalar": lambda: _inplace("addcdiv_scalar", _addcdiv_scalar, "scalar"),
    "_foreach_addcdiv_.ScalarList": lambda: _inplace("addcdiv_scalar_list",
                                                     _addcdiv_scalar_list, "list"),
    "_foreach_maximum_.List": lambda: _inplace("maximum_list", _maximum_list),
}


def _functional(name, fn):
    def kernel(self):
        results = _apply(name, fn, [self])
        if results is None:
            return _cpu_run(kernel.op, self)
        return list(results)

    return kernel


def _add_list_kernel(self, other, *, alpha=1):
    results = _apply("add_list", _add_list, [self, other], lambda d: _scalar(alpha, d))
    if results is None:
        return _cpu_run(_add_list_kernel.op, self, other, alpha=alpha)
    _write_back(self, results)


def register():
    """Registers the kernels for rbln (once)."""
    global _library
    if _library is not None:
        return
    _library = torch.library.Library("aten", "IMPL", "PrivateUse1")
    kernels = {name: make() for name, make in _OPS.items()}
    kernels["_foreach_add_.List"] = _add_list_kernel
    kernels["_foreach_sqrt"] = _functional("sqrt", _sqrt)
    kernels["_foreach_neg"] = _functional("neg", _neg)
    kernels["_fused_adamw_"] = _fused_adam(decoupled=True)
    kernels["_fused_adam_"] = _fused_adam(decoupled=False)
    for name, kernel in kernels.items():
        base, _, overload = name.partition(".")
        packet = getattr(torch.ops.aten, base)
        kernel.op = getattr(packet, overload or "default")
        _library.impl(name, kernel)
