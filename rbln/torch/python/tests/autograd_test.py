"""Autograd of the CompositeImplicitAutograd ops that have an rbln kernel
(composite_autograd.cc): gradients equal the CPU's, calls without a gradient
still run the rbln kernel, out= overloads refuse autograd as on the CPU, and
every such op has an AutogradPrivateUse1 kernel."""
# spec: G1

import sys

import pytest
import torch

from rbln_test_util import delta

DEV = "rbln:0"
DTYPES = [torch.float16, torch.bfloat16]


def tol(dtype):
    return {"atol": 1e-3, "rtol": 1e-3} if dtype == torch.float16 else {"atol": 1e-2, "rtol": 1.6e-2}


def grads_on(device, fn, inputs, grad_out_seed=1):
    """fn's output and the inputs' gradients for a fixed upstream gradient."""
    leaves = [t.detach().to(device).requires_grad_() for t in inputs]
    out = fn(*leaves)
    g = torch.Generator().manual_seed(grad_out_seed)
    upstream = torch.randn(out.shape, generator=g).to(out.dtype).to(device)
    out.backward(upstream)
    return out.detach().cpu(), [leaf.grad.cpu() for leaf in leaves]


def randn(*shape, dtype, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


# name: (fn, input shapes, whether the backward is all on the device). The
# backward of repeat_interleave sums over the repeats as the last dim when
# the repeated dim is the last one: a misaligned sum runs on the CPU (H3).
CASES = {
    "repeat_interleave.last_dim": (lambda x: torch.repeat_interleave(x, 3, dim=1), [(2, 64)], False),
    "repeat_interleave.flat": (lambda x: torch.repeat_interleave(x, 2), [(4, 32)], False),
    # Llama's repeat_kv of grouped-query attention: [b, kv_heads, s, d] -> heads.
    "repeat_interleave.gqa": (lambda x: x.repeat_interleave(2, dim=1), [(1, 2, 8, 64)], True),
    "max.other": (lambda a, b: torch.max(a, b), [(4, 64), (4, 64)], True),
    "min.other": (lambda a, b: torch.min(a, b), [(4, 64), (1, 64)], True),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gradient_matches_cpu(case, dtype):
    fn, shapes, on_device = CASES[case]
    inputs = [randn(*s, dtype=dtype, seed=i) for i, s in enumerate(shapes)]
    want_out, want_grads = grads_on("cpu", fn, inputs)
    c0 = torch.rbln.counters()
    got_out, got_grads = grads_on(DEV, fn, inputs)
    c1 = torch.rbln.counters()
    torch.testing.assert_close(got_out, want_out, **tol(dtype))
    for got, want in zip(got_grads, want_grads):
        torch.testing.assert_close(got, want, **tol(dtype))
    # The decomposition and its backward ran on rbln kernels: nothing fell
    # back for want of a kernel, and nothing at all where shapes align.
    assert delta(c0, c1, "signal/dispatch/cpu_fallback/count") == 0, c1
    if on_device:
        assert delta(c0, c1, "dispatch/cpu_fallback") == 0, c1


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_calls_without_gradient_run_the_rbln_kernel(dtype):
    x = randn(2, 64, dtype=dtype).to(DEV)
    w = randn(2, 64, dtype=dtype).to(DEV).requires_grad_()
    for ctx, t in ((torch.no_grad(), w), (torch.enable_grad(), x)):
        with ctx:
            c0 = torch.rbln.counters()
            out = torch.repeat_interleave(t, 2, dim=1)
            c1 = torch.rbln.counters()
        assert not out.requires_grad
        # One compiled program (the rbln kernel), not the decomposition's
        # unsqueeze/expand/clone.
        assert delta(c0, c1, "dispatch/compiled_runs") == 1, c1
        torch.testing.assert_close(out.cpu(), torch.repeat_interleave(t.detach().cpu(), 2, dim=1))


def test_out_overloads_refuse_autograd_like_the_cpu():
    for device in ("cpu", DEV):
        a = torch.ones(2, 64, dtype=torch.float16, device=device, requires_grad=True)
        b = torch.zeros(2, 64, dtype=torch.float16, device=device)
        out = torch.empty(2, 64, dtype=torch.float16, device=device)
        with pytest.raises(RuntimeError, match="don't support automatic differentiation"):
            torch.max(a, b, out=out)


def test_every_composite_op_with_an_rbln_kernel_has_an_autograd_kernel():
    # An rbln kernel on a CompositeImplicitAutograd op hides the
    # decomposition's autograd; composite_autograd.cc must list the op --
    # unless the op has a derivative formula of its own (a kernel for the
    # Autograd alias key, as silu_backward has), which then serves rbln as
    # it serves the CPU.
    missing = []
    for name in torch._C._dispatch_get_all_op_names():
        if not name.startswith("aten::"):
            continue
        if not (torch._C._dispatch_has_kernel_for_dispatch_key(name, "PrivateUse1")
                and torch._C._dispatch_has_kernel_for_dispatch_key(name, "CompositeImplicitAutograd")):
            continue
        base, _, overload = name.partition(".")
        schema = torch._C._get_schema(base, overload)
        if not any(isinstance(r.type, torch.TensorType) for r in schema.returns):
            continue  # Nothing to differentiate (_has_compatible_shallow_copy_type).
        if not any(torch._C._dispatch_has_kernel_for_dispatch_key(name, key)
                   for key in ("AutogradPrivateUse1", "Autograd")):
            missing.append(name)
    assert not missing, f"rbln kernels of composite ops without an autograd kernel: {missing}"


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
