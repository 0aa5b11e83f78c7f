"""Optimizer steps on rbln (issue 29): torch.optim's foreach ops and fused
Adam/AdamW run as compiled programs (torch_rbln/_optim_kernels.py), float32
included, with no CPU fallback; each op and a whole compiled GPT-2 training
step match the CPU."""
# spec: G1, I3, J1

import sys

import pytest
import torch
import transformers

DEV = "rbln"
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
    assert [t.untyped_storage().data_ptr() for t in dx] == storages  # in place
    assert_lists_close(dx, xs, dtype)


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


@pytest.mark.parametrize("flavor", [
    {"foreach": True}, {"fused": True}, {"fused": True, "amsgrad": True},
    {"fused": True, "maximize": True, "weight_decay": 0.1}])
def test_compiled_gpt2_training_step_with_adamw_runs_on_rbln(flavor):
    """A compiled forward/backward of GPT-2 (small config, float32) and
    AdamW: no op of the optimizer step falls back to the CPU, a changing
    learning rate compiles nothing new, and the parameters follow the CPU's
    AdamW applied to the same gradients."""
    model = gpt2().to(DEV)
    params = [p for p in model.parameters()]
    reference = [p.detach().cpu().clone().requires_grad_(True) for p in params]
    opt = torch.optim.AdamW(params, lr=1e-3, **flavor)
    ref_opt = torch.optim.AdamW(reference, lr=1e-3, **{k: v for k, v in flavor.items()
                                                       if k not in ("fused", "foreach")})
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
        assert fallbacks() == before, f"AdamW {flavor} fell back to the CPU at step {i}"
        compiles.append(torch.rbln.counters().get("graph/compiles", 0) - programs)
        ref_opt.step()
        sched.step()
        ref_sched.step()
        for r, p in zip(reference, params):
            torch.testing.assert_close(p.detach().cpu(), r.detach(), rtol=1e-5, atol=1e-6)
    assert compiles[1:] == [0, 0], f"the optimizer step compiled again: {compiles}"


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))
