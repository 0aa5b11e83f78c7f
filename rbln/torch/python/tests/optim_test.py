"""Optimizer steps on rbln (issue 29 item 5): torch.optim's foreach ops
(torch_rbln/_foreach_kernels.py) and fused Adam/AdamW/SGD
(torch_rbln/_optim_kernels.py) run as compiled device programs, float32
included, with no CPU fallback; each op, the fused kernels' gradient
scaling, and whole compiled GPT-2 training steps with AdamW (default,
foreach, fused, capturable), Adam and SGD match the CPU."""
# spec: G1, I3, J1

import sys

import pytest
import torch
import transformers

DEV = "rbln"
F32, BF16 = torch.float32, torch.bfloat16
transformers.logging.set_verbosity_error()


def fallbacks():
    return torch.rbln.counters().get("dispatch/cpu_fallback", 0)


def lists(dtype, shapes=((3, 5), (7,), (2, 2, 4)), seed=0, positive=False):
    gen = torch.Generator().manual_seed(seed)
    out = [torch.randn(s, generator=gen) for s in shapes]
    if positive:
        out = [t.abs() + 0.5 for t in out]
    return [t.to(dtype) for t in out]


def to_dev(ts):
    return [t.to(DEV) for t in ts]


def assert_lists_close(got, want, dtype):
    tol = {torch.float32: 1e-6, torch.bfloat16: 1e-2, torch.float16: 2e-3}[dtype]
    for g, w in zip(got, want):
        torch.testing.assert_close(g.cpu(), w, rtol=tol, atol=tol)


CASES = {
    "add_.Scalar": lambda xs, ys, zs: torch._foreach_add_(xs, 0.25),
    "add_.List": lambda xs, ys, zs: torch._foreach_add_(xs, ys, alpha=-0.5),
    "mul_.Scalar": lambda xs, ys, zs: torch._foreach_mul_(xs, 0.9),
    "mul_.List": lambda xs, ys, zs: torch._foreach_mul_(xs, ys),
    "div_.Scalar": lambda xs, ys, zs: torch._foreach_div_(xs, 3.0),
    "div_.ScalarList": lambda xs, ys, zs: torch._foreach_div_(xs, [2.0, 4.0, 0.5]),
    "lerp_.Scalar": lambda xs, ys, zs: torch._foreach_lerp_(xs, ys, 0.1),
    "addcmul_.Scalar": lambda xs, ys, zs: torch._foreach_addcmul_(xs, ys, zs, 0.3),
    "addcdiv_.Scalar": lambda xs, ys, zs: torch._foreach_addcdiv_(xs, ys, zs, -0.2),
    "addcdiv_.ScalarList": lambda xs, ys, zs: torch._foreach_addcdiv_(xs, ys, zs, [1.0, -2.0, 3.0]),
    "maximum_.List": lambda xs, ys, zs: torch._foreach_maximum_(xs, ys),
    # The capturable Adam/AdamW path and SGD's weight decay.
    "addcdiv_.Scalar default value": lambda xs, ys, zs: torch._foreach_addcdiv_(xs, ys, zs),
    "addcmul_.Scalar default value": lambda xs, ys, zs: torch._foreach_addcmul_(xs, ys, zs),
    "sub_.Scalar": lambda xs, ys, zs: torch._foreach_sub_(xs, 1.5),
    "div_.List": lambda xs, ys, zs: torch._foreach_div_(xs, zs),
    "div_.Tensor": lambda xs, ys, zs: torch._foreach_div_(xs, torch.tensor(0.3)),
    "mul_.Tensor": lambda xs, ys, zs: torch._foreach_mul_(xs, torch.tensor(0.7)),
    "reciprocal_": lambda xs, ys, zs: torch._foreach_reciprocal_(xs),
    "abs_ sqrt_": lambda xs, ys, zs: torch._foreach_abs_(xs) or torch._foreach_sqrt_(xs),
    "neg_": lambda xs, ys, zs: torch._foreach_neg_(xs),
    "clamp_min_.Scalar": lambda xs, ys, zs: torch._foreach_clamp_min_(xs, 0.1),
    "add.List functional": lambda xs, ys, zs: xs.__setitem__(
        slice(None), torch._foreach_add(xs, ys, alpha=0.1)),
    "pow.ScalarAndTensor": lambda xs, ys, zs: xs.__setitem__(
        slice(None), torch._foreach_pow(0.9, zs)),
    "norm.Scalar": lambda xs, ys, zs: xs.__setitem__(slice(None), torch._foreach_norm(xs)),
    "norm.Scalar inf": lambda xs, ys, zs: xs.__setitem__(
        slice(None), torch._foreach_norm(xs, float("inf"))),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", sorted(CASES))
def test_foreach_inplace_op_matches_cpu_without_fallback(name, dtype):
    xs, ys, zs = lists(dtype, seed=1), lists(dtype, seed=2), lists(dtype, seed=3, positive=True)
    dx, dy, dz = to_dev(xs), to_dev(ys), to_dev(zs)
    storages = [t.untyped_storage().data_ptr() for t in dx]
    CASES[name](xs, ys, zs)
    before = fallbacks()
    with torch.no_grad():
        CASES[name](dx, dy, dz)
    assert fallbacks() == before, f"_foreach_{name} fell back to the CPU"
    if name.split(".")[0].endswith("_"):
        assert [t.untyped_storage().data_ptr() for t in dx] == storages  # in place
    assert_lists_close(dx, xs, dtype)


def test_foreach_with_a_wider_operand_rounds_once_into_self():
    """The capturable AdamW step divides bfloat16 moments by float32 bias
    corrections: computed in float32, rounded once into self (ATen's slow
    path), on the device."""
    xs, zs = lists(torch.bfloat16, seed=1), lists(torch.float32, seed=3, positive=True)
    dx, dz = to_dev(xs), to_dev(zs)
    torch._foreach_div_(xs, zs)
    before = fallbacks()
    torch._foreach_div_(dx, dz)
    assert fallbacks() == before
    assert all(t.dtype == torch.bfloat16 for t in dx)
    assert_lists_close(dx, xs, torch.bfloat16)


def test_in_place_programs_write_aliased_views_and_strided_self_correctly():
    """The in-place programs update `self` as program inputs: a list that is
    also the operand, views sharing one storage, and a transposed tensor
    (made dense for the program, copied back) all end as on the CPU."""
    xs = lists(F32, seed=1)
    dx = to_dev(xs)
    torch._foreach_add_(dx, dx, alpha=0.5)
    torch._foreach_add_(xs, xs, alpha=0.5)
    assert_lists_close(dx, xs, F32)
    base = torch.randn(10)
    dev_base = base.to(DEV)
    torch._foreach_mul_([dev_base[0:5], dev_base[5:10]], 2.0)
    torch.testing.assert_close(dev_base.cpu(), base * 2.0)
    t = torch.randn(4, 6)
    dev_t = t.to(DEV).t()
    torch._foreach_mul_([dev_t], 3.0)
    torch.testing.assert_close(dev_t.cpu(), t.t() * 3.0)


def test_foreach_lists_the_device_cannot_compute_take_the_counted_cpu_fallback():
    """Integer lists have no device program: the CPU runs them, counted (I3)."""
    xs = [torch.arange(6, dtype=torch.int64), torch.arange(4, dtype=torch.int64)]
    dx = to_dev(xs)
    before = torch.rbln.counters().get("dispatch/cpu_fallback/aten::_foreach_add_", 0)
    torch._foreach_add_(dx, 3)
    torch._foreach_add_(xs, 3)
    assert torch.rbln.counters().get("dispatch/cpu_fallback/aten::_foreach_add_", 0) == before + 1
    for d, c in zip(dx, xs):
        assert torch.equal(d.cpu(), c)


@pytest.mark.parametrize("op", [torch._foreach_sqrt, torch._foreach_neg])
def test_foreach_functional_op_matches_cpu(op):
    xs = lists(torch.float32, positive=True)
    before = fallbacks()
    got = op(to_dev(xs))
    assert fallbacks() == before
    assert_lists_close(got, op(xs), torch.float32)


def gpt2():
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=512,
                                     n_positions=64, resid_pdrop=0.0, embd_pdrop=0.0,
                                     attn_pdrop=0.0)
    return transformers.GPT2LMHeadModel(config)


# (optimizer, its arguments, parameter dtype). No foreach/fused argument is
# torch.optim's default choice, which is foreach on rbln as on CUDA.
FLAVORS = [
    ("AdamW", {}, F32), ("AdamW", {}, BF16), ("AdamW", {"foreach": True}, F32),
    ("AdamW", {"fused": True}, F32), ("AdamW", {"fused": True}, BF16),
    ("AdamW", {"fused": True, "amsgrad": True}, F32),
    ("AdamW", {"fused": True, "maximize": True, "weight_decay": 0.1}, F32),
    ("AdamW", {"capturable": True}, F32),
    ("AdamW", {"capturable": True, "amsgrad": True}, BF16),
    ("AdamW", {"fused": True, "capturable": True}, F32),
    ("Adam", {"weight_decay": 0.1}, F32), ("Adam", {"fused": True}, BF16),
    ("SGD", {"momentum": 0.9}, F32),
    ("SGD", {"momentum": 0.9, "nesterov": True, "weight_decay": 0.01}, BF16),
    ("SGD", {"momentum": 0.9, "fused": True}, F32),
]


def reference_arguments(kwargs):
    """The CPU optimizer to compare with: the same kernel family (the CPU's
    foreach and fused kernels round as rbln's do), not capturable (the CPU
    cannot)."""
    ref = {k: v for k, v in kwargs.items() if k != "capturable"}
    if not ref.get("fused"):
        ref["foreach"] = True
    return ref


@pytest.mark.parametrize("name,kwargs,dtype", FLAVORS,
                         ids=[f"{n}-{k}-{str(d)[6:]}" for n, k, d in FLAVORS])
def test_compiled_gpt2_training_step_optimizer_runs_on_rbln(name, kwargs, dtype):
    """A compiled forward/backward of GPT-2 (small config) and an optimizer
    step: no op of the step falls back to the CPU, a changing learning rate
    compiles nothing new, and after 3 steps the parameters equal the CPU
    optimizer's applied to the same gradients from the same init."""
    model = gpt2().to(dtype).to(DEV)
    params = [p for p in model.parameters()]
    reference = [p.detach().cpu().clone().requires_grad_(True) for p in params]
    cls = getattr(torch.optim, name)
    lr = 1e-2 if name == "SGD" else 1e-3
    opt = cls(params, lr=lr, **kwargs)
    ref_opt = cls(reference, lr=lr, **reference_arguments(kwargs))
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    ref_sched = torch.optim.lr_scheduler.StepLR(ref_opt, step_size=1, gamma=0.5)
    step = torch.compile(model, backend="rbln")
    ids = torch.randint(0, 512, (2, 16), generator=torch.Generator().manual_seed(1)).to(DEV)
    compiles = []
    for i in range(3):
        opt.zero_grad()
        step(input_ids=ids, labels=ids).loss.backward()
        for r, p in zip(reference, params):
            r.grad = p.grad.cpu()
        before, programs = fallbacks(), torch.rbln.counters().get("graph/compiles", 0)
        opt.step()
        assert fallbacks() == before, f"{name} {kwargs} fell back to the CPU at step {i}"
        compiles.append(torch.rbln.counters().get("graph/compiles", 0) - programs)
        ref_opt.step()
        sched.step()
        ref_sched.step()
    # float32: Adam's normalized update m / (sqrt(v) + eps) amplifies a
    # one-ulp difference of a gradient that nearly cancels (g + wd * p) up to
    # a fraction of lr (1e-3), so atol is 1% of lr. bfloat16: a sum that
    # nearly cancels may round one bf16 ulp of the parameters' scale (GPT-2
    # init std 0.02: 1.2e-4) apart, whether or not the CPU used an FMA.
    tol = {F32: dict(rtol=1e-5, atol=1e-5), BF16: dict(rtol=1.6e-2, atol=1.2e-4)}[dtype]
    for r, p in zip(reference, params):
        torch.testing.assert_close(p.detach().cpu(), r.detach(), **tol)
    # SGD's first step creates the momentum buffers: a path of its own.
    settled = 2 if name == "SGD" else 1
    assert not any(compiles[settled:]), f"the optimizer step compiled again: {compiles}"


@pytest.mark.parametrize("found_inf", [0.0, 1.0])
@pytest.mark.parametrize("kernel", ["adamw", "sgd"])
def test_fused_kernels_unscale_gradients_and_skip_on_found_inf_like_the_cpu(kernel, found_inf):
    """GradScaler's arguments of the fused kernels (grad_scale, found_inf)
    on the device: gradients divided by the scale and stored back unscaled,
    nothing written when found_inf is 1 -- ATen's CPU kernel's results."""
    params, grads, bufs = lists(F32, seed=1), lists(F32, seed=2), lists(F32, seed=3)
    grads = [g * 1024 for g in grads]
    sqs = lists(F32, seed=4, positive=True)
    steps = [torch.tensor(3.0) for _ in params]

    def run(device):
        p, g, m, v = (to_dev(x) if device == DEV else [t.clone() for t in x]
                      for x in (params, grads, bufs, sqs))
        s = [t.to(device) for t in steps]
        scale = dict(grad_scale=torch.tensor(1024.0, device=device),
                     found_inf=torch.tensor(found_inf, device=device))
        if kernel == "adamw":
            torch._fused_adamw_(p, g, m, v, [], s, lr=1e-2, beta1=0.9, beta2=0.99,
                                weight_decay=0.1, eps=1e-8, amsgrad=False, maximize=False, **scale)
        else:
            torch._fused_sgd_(p, g, m, weight_decay=0.1, momentum=0.9, lr=1e-2, dampening=0.0,
                              nesterov=True, maximize=False, is_first_step=False, **scale)
        return p + g + m + v

    before = fallbacks()
    got = run(DEV)
    assert fallbacks() == before
    assert_lists_close(got, run("cpu"), F32)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))
