"""Eager ops compute like PyTorch's CPU kernels: a float16/bfloat16 input in
float32 (`at::opmath_type`) with eps and alpha in float32 (issue 28 item 1).

An op without an rbln kernel runs ATen's composite kernel on rbln where the
CPU runs its own kernel; the composite computes in the input's dtype. Such
ops are pinned to the CPU kernel (host_path_ops.cc); the audit of every eager
path is in docs/numerics.md, and `test_no_unreviewed_composite_replaces_a_cpu_kernel`
keeps it complete when PyTorch adds ops."""
# spec: G1, I5

import sys

import pytest
import torch
import torch.nn.functional as F

HALF_TYPES = [torch.float16, torch.bfloat16]

# Ops whose composite kernel runs on rbln although the CPU has a kernel of
# its own, reviewed as computing the same values (test_reviewed_composites_
# match_the_cpu checks them): concatenation, boolean reductions, a channel
# permutation, and _powsum, whose composite calls the opmath reductions.
SAME_AS_CPU = {
    "aten::_stack", "aten::_stack.out", "aten::all.dims_out", "aten::any.dims_out",
    "aten::linalg__powsum", "aten::native_channel_shuffle",
}


def _dispatch_entry(table, key):
    for line in table.splitlines():
        if line.startswith(key + ":"):
            return line
    return ""


def composites_replacing_cpu_kernels():
    """aten ops that run a composite kernel on rbln (CompositeExplicitAutograd
    for PrivateUse1, or CompositeImplicitAutograd at AutogradPrivateUse1)
    while the CPU runs a kernel of its own. (CompositeExplicitAutograd-
    NonFunctional kernels call the out= overload, which reaches the CPU
    kernel through the fallback.)"""
    found = set()
    for name in torch._C._dispatch_get_all_op_names():
        if not name.startswith("aten::"):
            continue
        table = torch._C._dispatch_dump_table(name)
        if "[kernel]" not in _dispatch_entry(table, "CPU"):
            continue
        ours = _dispatch_entry(table, "PrivateUse1")
        autograd = _dispatch_entry(table, "AutogradPrivateUse1")
        if ("RegisterCompositeExplicitAutograd_" in ours or "math kernel" in ours or
                ("math kernel" in autograd and
                 "math kernel" not in _dispatch_entry(table, "AutogradCPU"))):
            found.add(name)
    return found


def test_no_unreviewed_composite_replaces_a_cpu_kernel():
    unreviewed = composites_replacing_cpu_kernels() - SAME_AS_CPU
    assert not unreviewed, (
        f"{sorted(unreviewed)} run ATen's composite kernel on rbln where the CPU has its own "
        "kernel: check that the composite computes half inputs like the CPU kernel (then add "
        "the op to SAME_AS_CPU with a test) or pin it to the CPU kernel (host_path_ops.cc), "
        "and record it in docs/numerics.md")


def rows_with_zero_variance(shape, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=gen)
    x[0] = 0.0  # A zero row: variance 0.
    x[-1] = 3.0  # A constant row.
    return x.to(dtype)


def run_both(fn, *args):
    return fn(*args), fn(*[a.to("rbln") if isinstance(a, torch.Tensor) else a for a in args])


def assert_same(got, want):
    got = got.cpu()
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want, atol=0, rtol=0, equal_nan=True)


NORMS = {
    "layer_norm": lambda x, w, b, eps: F.layer_norm(x, (64,), w, b, eps=eps),
    "layer_norm_no_affine": lambda x, w, b, eps: F.layer_norm(x, (64,), eps=eps),
    "group_norm": lambda x, w, b, eps: F.group_norm(x.reshape(4, 8, 64), 2, w[:8], b[:8],
                                                    eps=eps),
    "rms_norm": lambda x, w, b, eps: F.rms_norm(x, (64,), w, eps=eps),
    "batch_norm_train": lambda x, w, b, eps: F.batch_norm(
        x.reshape(4, 8, 64).transpose(0, 1), None, None, w[:4], b[:4], training=True, eps=eps),
    "instance_norm": lambda x, w, b, eps: F.instance_norm(x.reshape(1, 4, 8 * 64), eps=eps),
}


@pytest.mark.parametrize("eps", [1e-12, 1e-5])
@pytest.mark.parametrize("dtype", HALF_TYPES, ids=str)
@pytest.mark.parametrize("norm", sorted(NORMS))
def test_norms_of_constant_rows_equal_the_cpu(norm, dtype, eps):
    # The issue's reproducer: layer_norm of a zero row with eps=1e-12 in
    # float16 gave NaN on rbln (native_batch_norm in half: eps rounded to 0,
    # rsqrt(0) = inf, 0 * inf), zeros on the CPU. Where the CPU kernel itself
    # stores 1/sqrt(eps) in half (batch_norm's training statistics), rbln
    # gives the CPU's NaN too: the CPU is the reference.
    x = rows_with_zero_variance((4, 8, 64), dtype)
    gen = torch.Generator().manual_seed(1)
    w, b = (torch.randn(64, generator=gen).to(dtype) for _ in range(2))
    want, got = run_both(lambda x, w, b: NORMS[norm](x, w, b, eps), x, w, b)
    assert_same(got, want)


@pytest.mark.parametrize("dtype", HALF_TYPES, ids=str)
def test_layer_norm_snippet_of_issue_28(dtype):
    x = torch.zeros(2, 8, 64, dtype=dtype)
    x[1] = torch.randn(8, 64, generator=torch.Generator().manual_seed(0))
    w = torch.ones(64, dtype=dtype)
    b = torch.zeros(64, dtype=dtype)
    want, got = run_both(lambda x, w, b: F.layer_norm(x, (64,), w, b, eps=1e-12), x, w, b)
    assert not got.cpu().isnan().any()
    assert torch.equal(got.cpu()[0], torch.zeros(8, 64, dtype=dtype))
    assert_same(got, want)


@pytest.mark.parametrize("dtype", HALF_TYPES, ids=str)
@pytest.mark.parametrize("norm", ["layer_norm", "layer_norm_no_affine", "group_norm",
                                  "rms_norm"])
def test_compiled_norms_of_constant_rows_are_opmath(norm, dtype):
    # The compile path's converters: statistics in float32, eps an f32
    # constant (eps=1e-12 stays 1e-12), the mean subtracted before scaling,
    # so a constant row gives the bias exactly -- the float64 result. (The
    # CPU's half group_norm computes x * scale + (bias - mean * scale),
    # which leaves |mean| * 1e6 * 2^-24 of noise there: 0.125 for a bias of
    # -0.025. Instance norm's CPU kernel is batch norm's: see below.)
    x = rows_with_zero_variance((4, 8, 64), dtype)
    gen = torch.Generator().manual_seed(1)
    w, b = (torch.randn(64, generator=gen).to(dtype) for _ in range(2))
    fn = lambda x, w, b: NORMS[norm](x, w, b, 1e-12)  # noqa: E731
    want = fn(x.double(), w.double(), b.double()).to(dtype)
    torch._dynamo.reset()
    got = torch.compile(fn, backend="rbln", dynamic=False, fullgraph=True)(
        x.to("rbln"), w.to("rbln"), b.to("rbln")).cpu()
    assert not got.isnan().any()
    tol = 1e-2 if dtype == torch.float16 else 4e-2
    torch.testing.assert_close(got, want, atol=tol, rtol=tol)


@pytest.mark.parametrize("norm", ["batch_norm", "instance_norm"])
def test_compiled_batch_norm_of_a_constant_channel_is_opmath(norm):
    # The norm whose CPU kernel is not opmath: in training it keeps
    # 1/sqrt(var + eps) in half, so a zero-variance channel with eps=1e-12
    # gives NaN on the CPU (and in eager rbln, which runs that kernel;
    # instance_norm is batch_norm over [1, N*C, *]). torch.compile follows
    # PyTorch's decomposition, in float32: zeros, as Inductor gives.
    x = rows_with_zero_variance((4, 8, 64), torch.float16).transpose(0, 1).contiguous()
    if norm == "batch_norm":
        fn = lambda x: F.batch_norm(x, None, None, training=True, eps=1e-12)  # noqa: E731
    else:
        fn = lambda x: F.instance_norm(x, eps=1e-12)  # noqa: E731
    assert fn(x)[:, 0].isnan().all()
    assert fn(x.to("rbln")).cpu()[:, 0].isnan().all()
    torch._dynamo.reset()
    got = torch.compile(fn, backend="rbln", dynamic=False, fullgraph=True)(x.to("rbln")).cpu()
    assert torch.equal(got[:, 0], torch.zeros_like(got[:, 0]))
    torch.testing.assert_close(got, fn(x.double()).half(), atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("dtype", HALF_TYPES, ids=str)
@pytest.mark.parametrize("norm", ["layer_norm", "group_norm"])
def test_norm_gradients_equal_the_cpu(norm, dtype):
    x = rows_with_zero_variance((4, 8, 64), dtype)
    gen = torch.Generator().manual_seed(2)
    w, b, g = (torch.randn(s, generator=gen).to(dtype) for s in (64, 64, (4, 8, 64)))

    def grads(device):
        leaves = [t.to(device).requires_grad_() for t in (x, w, b)]
        out = NORMS[norm](*leaves, 1e-5)
        out.backward(g.to(device).reshape(out.shape))
        return [t.grad.cpu() for t in leaves if t.grad is not None]

    for got, want in zip(grads("rbln"), grads("cpu")):
        assert_same(got, want)


@pytest.mark.parametrize("dtype", HALF_TYPES, ids=str)
@pytest.mark.parametrize("act", ["silu", "mish"])
def test_activation_backward_equals_the_cpu(act, dtype):
    # ATen's math_silu_backward / math_mish_backward round every step to the
    # input's dtype; the CPU kernels compute in float32 and round once.
    gen = torch.Generator().manual_seed(3)
    x = (torch.randn(8, 64, generator=gen) * 4).to(dtype)
    g = torch.randn(8, 64, generator=gen).to(dtype)
    backward = getattr(torch.ops.aten, f"{act}_backward")
    want, got = run_both(backward, g, x)
    assert_same(got, want)

    def autograd(device):
        leaf = x.to(device).requires_grad_()
        getattr(F, act)(leaf).backward(g.to(device))
        return leaf.grad.cpu()

    assert_same(autograd("rbln"), autograd("cpu"))


@pytest.mark.parametrize("dtype", HALF_TYPES, ids=str)
def test_addr_equals_the_cpu(dtype):
    # math_addr rounded alpha * outer(v1, v2) to half before adding beta *
    # self; the CPU kernel rounds once.
    gen = torch.Generator().manual_seed(4)
    s = torch.randn(64, 64, generator=gen).to(dtype)
    v1, v2 = (torch.randn(64, generator=gen).to(dtype) for _ in range(2))
    want, got = run_both(lambda s, a, b: torch.addr(s, a, b, beta=0.3, alpha=1.7), s, v1, v2)
    assert_same(got, want)
    out = torch.empty(64, 64, dtype=dtype, device="rbln")
    torch.addr(s.to("rbln"), v1.to("rbln"), v2.to("rbln"), beta=0.3, alpha=1.7, out=out)
    assert_same(out, want)


@pytest.mark.parametrize("dtype", HALF_TYPES, ids=str)
def test_reviewed_composites_match_the_cpu(dtype):
    gen = torch.Generator().manual_seed(5)
    x = (torch.rand(4, 4096, generator=gen) * 0.9 + 0.05).to(dtype)
    for ord in (2.0, 3.0):
        want, got = run_both(lambda x: torch.ops.aten.linalg__powsum(x, ord, [-1]), x)
        assert_same(got, want)
    want, got = run_both(lambda a, b: torch.ops.aten._stack([a, b], 1), x, x * 2)
    assert_same(got, want)
    want, got = run_both(lambda a: torch.native_channel_shuffle(a, 2), x.reshape(1, 4, 4096))
    assert_same(got, want)
    m = x > 0.5
    for op in (torch.all, torch.any):
        want, got = run_both(lambda m: op(m, dim=(0, 1)), m)
        assert_same(got, want)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
