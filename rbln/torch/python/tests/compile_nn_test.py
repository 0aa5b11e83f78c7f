"""torch.compile(backend="rbln") of NN ops (convolutions, norms, pools,
sampling) against PyTorch on the CPU, each graph one program with no host op."""
# spec: J1, J6

import pytest
import torch
import torch._dynamo
import torch.nn.functional as F

import torch_rbln  # noqa: F401

DEV = "rbln:0"
DTYPES = [torch.float16, torch.bfloat16, torch.float32]
# Sums of many products: the compiler accumulates in float32 once, ATen's CPU
# kernels in their own order.
TOL = {
    torch.float16: dict(atol=2e-2, rtol=2e-2),
    torch.bfloat16: dict(atol=8e-2, rtol=8e-2),
    torch.float32: dict(atol=1e-4, rtol=1e-4),
}


@pytest.fixture(autouse=True)
def fresh_dynamo(monkeypatch):
    # A graph the compiler cannot take must fail the test, not run on the CPU.
    monkeypatch.setenv("TORCH_RBLN_DISABLE_FALLBACK", "compile_error")
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def check_compiled(fn, *args, dtype, tol=None):
    """fn compiled on rbln (one program, no host op) equals fn on the CPU."""
    expected = fn(*args)
    compiled = torch.compile(fn, backend="rbln", dynamic=False, fullgraph=True,
                             options={"host_ops": "none"})
    before = len(torch.rbln.compiled_programs())
    got = compiled(*[a.to(DEV) if isinstance(a, torch.Tensor) else a for a in args])
    assert len(torch.rbln.compiled_programs()) == before + 1
    expected = expected if isinstance(expected, (tuple, list)) else (expected,)
    got = got if isinstance(got, (tuple, list)) else (got,)
    assert len(got) == len(expected)
    for e, g in zip(expected, got):
        assert g.dtype == e.dtype and g.shape == e.shape, (g.dtype, g.shape, e.dtype, e.shape)
        torch.testing.assert_close(g.cpu(), e, **(tol or TOL[dtype]))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("weight,bias", [(True, True), (False, True), (True, False), (False, False)])
def test_native_layer_norm_matches_cpu_dtypes_and_values(dtype, weight, bias):
    # mean/rstd have the input's dtype as on the CPU (fake_impls.py), and a
    # bias without a weight is the bias (fx_to_ir's has_weight).
    torch.manual_seed(0)
    x = torch.randn(2, 3, 8, dtype=dtype)
    w = torch.randn(3, 8, dtype=dtype) if weight else None
    b = torch.randn(3, 8, dtype=dtype) if bias else None

    def fn(x, w, b):
        return torch.ops.aten.native_layer_norm(x, (3, 8), w, b, 1e-5)

    check_compiled(fn, x, w, b, dtype=dtype)
