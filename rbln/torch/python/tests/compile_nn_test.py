"""torch.compile(backend="rbln") of NN ops (convolutions, norms, pools,
sampling) against PyTorch on the CPU, each graph one program with no host op."""
# spec: J1, J6

import sys

import pytest
import torch
import torch._dynamo
import torch.nn.functional as F

import torch_rbln  # noqa: F401
from rbln_test_util import fresh_dynamo, strict_fresh_dynamo  # noqa: F401 (fixtures)

DEV = "rbln:0"
DTYPES = [torch.float16, torch.bfloat16, torch.float32]
# Sums of many products: the compiler accumulates in float32 once, ATen's CPU
# kernels in their own order.
TOL = {
    torch.float16: dict(atol=2e-2, rtol=2e-2),
    torch.bfloat16: dict(atol=8e-2, rtol=8e-2),
    torch.float32: dict(atol=1e-4, rtol=1e-4),
}


# Every test on fresh Dynamo caches, failing on a graph the compiler cannot take (rbln_test_util).
pytestmark = pytest.mark.usefixtures("strict_fresh_dynamo")


def check_compiled(fn, *args, dtype, tol=None, exact_reference=False):
    """fn compiled on rbln (one program, no host op) equals fn on the CPU
    (with `exact_reference`, fn on the CPU in float64, rounded to `dtype`:
    for ops whose CPU kernels compute in the half type)."""
    if exact_reference:
        wide = [a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a
                for a in args]
        expected = fn(*wide).to(dtype)
    else:
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


CONVS = [
    # (fn name, input shape, weight shape, kwargs)
    ("conv1d", (2, 4, 9), (6, 2, 3), dict(stride=2, padding=1, dilation=2, groups=2)),
    ("conv2d", (2, 3, 8, 7), (4, 3, 3, 2), dict(stride=(2, 1), padding=(1, 0))),
    ("conv2d", (1, 4, 6, 6), (4, 1, 3, 3), dict(padding=1, groups=4)),
    ("conv3d", (1, 2, 4, 5, 4), (3, 2, 2, 3, 2), dict(stride=(1, 2, 1), padding=1)),
    ("conv_transpose1d", (1, 4, 5), (4, 3, 3), dict(stride=2, padding=1, output_padding=1)),
    ("conv_transpose2d", (2, 4, 3, 4), (4, 2, 3, 2), dict(stride=2, padding=(1, 0), groups=2,
                                                          dilation=(1, 2))),
    ("conv_transpose3d", (1, 2, 2, 3, 2), (2, 3, 2, 2, 2), dict(stride=2)),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CONVS, ids=[f"{c[0]}-{i}" for i, c in enumerate(CONVS)])
def test_convolution_forward_and_backward(dtype, case):
    # One program for the forward, one for the backward (convolution_backward
    # with every gradient), against autograd on the CPU.
    name, xs, ws, kwargs = case
    fn = getattr(F, name)
    torch.manual_seed(0)
    x, w = torch.randn(xs, dtype=dtype), torch.randn(ws, dtype=dtype)
    out_channels = ws[1] * kwargs.get("groups", 1) if "transpose" in name else ws[0]
    b = torch.randn(out_channels, dtype=dtype)
    check_compiled(lambda x, w, b: fn(x, w, b, **kwargs), x, w, b, dtype=dtype)

    def loss_grads(x, w, b):
        x, w, b = (t.detach().requires_grad_() for t in (x, w, b))
        fn(x, w, b, **kwargs).float().square().sum().backward()
        return x.grad, w.grad, b.grad

    expected = loss_grads(x, w, b)
    torch._dynamo.reset()
    compiled = torch.compile(lambda x, w, b: fn(x, w, b, **kwargs), backend="rbln",
                             dynamic=False, fullgraph=True, options={"host_ops": "none"})
    xd, wd, bd = (t.to(DEV).requires_grad_() for t in (x, w, b))
    compiled(xd, wd, bd).float().square().sum().backward()
    tol = {torch.float16: dict(atol=0.1, rtol=2e-2), torch.bfloat16: dict(atol=0.5, rtol=8e-2),
           torch.float32: dict(atol=1e-3, rtol=1e-4)}[dtype]
    for e, g in zip(expected, (xd.grad, wd.grad, bd.grad)):
        torch.testing.assert_close(g.cpu(), e, **tol)


@pytest.mark.parametrize("dtype", DTYPES)
def test_batch_norm_training_updates_running_stats(dtype):
    # _native_batch_norm_legit_functional: batch statistics, and the module's
    # running stats updated in place as on the CPU (one program).
    torch.manual_seed(0)
    x = torch.randn(4, 3, 5, 5, dtype=dtype)
    cpu = torch.nn.BatchNorm2d(3, momentum=0.3).to(dtype)
    dev = torch.nn.BatchNorm2d(3, momentum=0.3).to(dtype).to(DEV)
    with torch.no_grad():
        for m in (cpu, dev):
            m.weight.copy_(torch.linspace(0.5, 1.5, 3))
            m.bias.copy_(torch.linspace(-1, 1, 3))
    compiled = torch.compile(dev, backend="rbln", dynamic=False, fullgraph=True,
                             options={"host_ops": "none"})
    with torch.no_grad():
        for _ in range(2):
            expected = cpu(x)
            got = compiled(x.to(DEV))
            torch.testing.assert_close(got.cpu(), expected, **TOL[dtype])
    torch.testing.assert_close(dev.running_mean.cpu(), cpu.running_mean, **TOL[dtype])
    torch.testing.assert_close(dev.running_var.cpu(), cpu.running_var, **TOL[dtype])
    assert int(dev.num_batches_tracked) == 2
    cpu.eval()
    dev.eval()
    torch._dynamo.reset()
    check_compiled(lambda x, m, v, w, b: F.batch_norm(x, m, v, w, b, training=False),
                   x, cpu.running_mean, cpu.running_var, cpu.weight.detach(), cpu.bias.detach(),
                   dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_group_norm(dtype):
    torch.manual_seed(0)
    x = torch.randn(2, 6, 4, 3, dtype=dtype)
    w, b = torch.randn(6, dtype=dtype), torch.randn(6, dtype=dtype)
    check_compiled(lambda x, w, b: F.group_norm(x, 3, w, b), x, w, b, dtype=dtype)
    check_compiled(lambda x: F.group_norm(x, 2), x, dtype=dtype)


POOLS = [
    ("max_pool2d", lambda x: F.max_pool2d(x, 3, 2, 1, dilation=1, ceil_mode=True,
                                          return_indices=True), (2, 3, 7, 8)),
    ("max_pool1d", lambda x: F.max_pool1d(x, 2), (2, 3, 9)),
    ("max_pool3d", lambda x: F.max_pool3d(x, 2, padding=1, return_indices=True), (1, 2, 4, 5, 3)),
    ("avg_pool2d", lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
     (2, 3, 7, 8)),
    ("avg_pool2d_div", lambda x: F.avg_pool2d(x, 2, divisor_override=3), (3, 6, 6)),
    ("avg_pool1d", lambda x: F.avg_pool1d(x, 3, 2, 1), (2, 3, 9)),
    ("adaptive_avg_pool2d", lambda x: F.adaptive_avg_pool2d(x, (3, 5)), (2, 3, 7, 8)),
    ("adaptive_avg_pool1d", lambda x: F.adaptive_avg_pool1d(x, 4), (2, 3, 9)),
    ("adaptive_avg_pool3d", lambda x: F.adaptive_avg_pool3d(x, 2), (1, 2, 4, 5, 3)),
    ("adaptive_max_pool2d", lambda x: F.adaptive_max_pool2d(x, 3, return_indices=True),
     (2, 3, 7, 8)),
    ("adaptive_max_pool3d", lambda x: F.adaptive_max_pool3d(x, (2, 3, 2)), (1, 2, 4, 5, 3)),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", POOLS, ids=[c[0] for c in POOLS])
def test_pools_forward_and_backward(dtype, case):
    name, fn, shape = case
    torch.manual_seed(0)
    x = torch.randn(shape, dtype=dtype)
    check_compiled(fn, x, dtype=dtype)

    def first(out):
        return out[0] if isinstance(out, tuple) else out

    if dtype == torch.bfloat16:
        return  # Backward: float16 and float32 (pooling_ops_test: every dtype).
    xc = x.clone().requires_grad_()
    first(fn(xc)).float().square().sum().backward()
    torch._dynamo.reset()
    compiled = torch.compile(lambda x: first(fn(x)), backend="rbln", dynamic=False,
                             fullgraph=True, options={"host_ops": "none"})
    xd = x.to(DEV).requires_grad_()
    compiled(xd).float().square().sum().backward()
    torch.testing.assert_close(xd.grad.cpu(), xc.grad, **TOL[dtype])


GRID_SAMPLES = [(mode, padding, align, torch.float32)
                for mode in ("bilinear", "nearest", "bicubic")
                for padding in ("zeros", "border", "reflection")
                for align in (False, True)]
GRID_SAMPLES += [("bilinear", "zeros", False, torch.float16),
                 ("bicubic", "reflection", True, torch.bfloat16)]


@pytest.mark.parametrize("mode,padding_mode,align,dtype", GRID_SAMPLES)
def test_grid_sample(mode, padding_mode, align, dtype):
    # Every mode in float32; the half types once each (sampling_ops_test
    # covers every combination in every dtype). The CPU computes the weights
    # in the half type: compare with float64 rounded once.
    torch.manual_seed(0)
    x = torch.randn(2, 3, 5, 6, dtype=dtype)
    grid = (torch.rand(2, 4, 3, 2) * 3 - 1.5).to(dtype)
    check_compiled(lambda x, g: F.grid_sample(x, g, mode=mode, padding_mode=padding_mode,
                                              align_corners=align),
                   x, grid, dtype=dtype, exact_reference=True)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))


@pytest.mark.parametrize("dtype", [torch.float32])  # ATen's cdist/pdist take floats >= 32 bits
@pytest.mark.parametrize("p", [0.0, 1.0, 2.0, 3.0, float("inf")])
def test_cdist_and_pdist_compile_as_pairwise_differences(dtype, p):
    # _cdist_forward/_pdist_forward are core ATen ops with no device kernel:
    # the backend decomposes them (capture._cdist_forward), so they compile.
    torch.manual_seed(0)
    x1 = torch.randn(2, 5, 4, dtype=dtype)
    x2 = torch.randn(2, 3, 4, dtype=dtype)
    x2[0, 0] = x1[0, 0]  # a zero distance: p=0 counts, sqrt(0) stays 0
    x = torch.randn(6, 3, dtype=dtype)
    check_compiled(lambda a, b: torch.cdist(a, b, p=p), x1, x2, dtype=dtype)
    torch._dynamo.reset()
    check_compiled(lambda a: torch.pdist(a, p=p), x, dtype=dtype)


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_chunked_linear_cross_entropy_inference_is_device_code(reduction):
    # F.linear_cross_entropy with options= calls torch_nn:: custom ops
    # (opaque to aot_autograd); with no gradient the backend inlines their
    # Python kernels: one program, no host op, the CPU's values.
    from torch.nn.modules.linear_cross_entropy_options import LinearCrossEntropyOptions

    torch.manual_seed(0)
    options = LinearCrossEntropyOptions(batch_chunk_size=3, allow_retain_graph=True)
    x, w, b = torch.randn(8, 16), torch.randn(10, 16), torch.randn(10)
    target = torch.randint(0, 10, (8,))

    def loss(x, w, b, target):
        return F.linear_cross_entropy(x, w, target, linear_bias=b, reduction=reduction,
                                      options=options)

    with torch.no_grad():
        check_compiled(loss, x, w, b, target, dtype=torch.float32)


@pytest.mark.parametrize("dtype", DTYPES)
def test_safe_softmax_zeroes_fully_masked_rows(dtype):
    # SDPA's softmax, decomposed by the backend (capture._safe_softmax) with
    # one row max for both the softmax and the all -inf test: fully masked
    # rows give 0, partly masked rows the softmax of the rest, a NaN row NaN,
    # as on the CPU; with dtype=float32 the half input is widened first.
    torch.manual_seed(0)
    x = torch.randn(2, 3, 5, 7, dtype=dtype)
    x[0, 1, 2] = float("-inf")
    x[1, 0, :, 3:] = float("-inf")
    x[1, 2, 4, 0] = float("nan")
    tol = dict(TOL[dtype], equal_nan=True)
    check_compiled(lambda t: torch.ops.aten._safe_softmax(t, -1), x, dtype=dtype, tol=tol)
    torch._dynamo.reset()
    check_compiled(lambda t: torch.ops.aten._safe_softmax(t, -1, torch.float32), x,
                   dtype=dtype, tol=dict(TOL[torch.float32], equal_nan=True))
