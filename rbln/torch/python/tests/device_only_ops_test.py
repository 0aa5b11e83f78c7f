"""Ops in dtypes CUDA runs and the CPU kernel rejects, on rbln as CUDA
computes them (issue 30; docs/cuda-dtypes.md): integer histc, checked
against the CPU's histc of the float64-cast input (the same bins for
integers of this size); bool abs and trace; float16/bfloat16 avg_pool3d,
margin losses and antialiased bilinear resizing, computed in float32
(opmath) and rounded once, checked against the CPU's float32 result
rounded. Each runs as a device program, eagerly and compiled."""
# spec: G1, H1, J6

import os

# Read at process start (SPEC I6): a compile failure raises instead of
# running the graph on the CPU, so every pass here is a device run.
os.environ["TORCH_RBLN_DISABLE_FALLBACK"] = "compile_error"

import sys  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402


def counters_delta(fn):
    before = torch.rbln.counters()
    result = fn()
    after = torch.rbln.counters()
    return result, {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}


def reference(x, bins, lo, hi):
    return torch.histc(x.double(), bins=bins, min=lo, max=hi).to(x.dtype)


def test_acceptance_int32_histc_counts_like_cuda():
    x = torch.tensor([0, 1, 1, 3, 2, 3, 3], dtype=torch.int32, device="rbln")
    got, delta = counters_delta(lambda: torch.histc(x, bins=4, min=0, max=3))
    assert got.device.type == "rbln" and got.dtype == torch.int32
    assert got.cpu().tolist() == [1, 2, 1, 3]
    # A device program, not a hidden CPU computation.
    assert delta.get("graph/runs", 0) == 1
    assert delta.get("dispatch/cpu_fallback", 0) == 0


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.int16, torch.int8, torch.uint8])
@pytest.mark.parametrize("bins,lo,hi", [(8, 0, 7), (5, -3, 20), (3, 0, 0), (16, 2, 2)])
def test_matches_cpu_reference(dtype, bins, lo, hi):
    g = torch.Generator().manual_seed(bins * 7 + lo)
    x = torch.randint(0 if dtype == torch.uint8 else -6, 25, (3, 41), generator=g, dtype=dtype)
    got = torch.histc(x.to("rbln"), bins=bins, min=lo, max=hi)
    assert got.dtype == dtype
    assert torch.equal(got.cpu(), reference(x, bins, lo, hi))


def test_constant_data_widens_the_range():
    x = torch.full((5,), 4, dtype=torch.int32)
    got = torch.histc(x.to("rbln"), bins=3)
    assert torch.equal(got.cpu(), reference(x, 3, 0, 0))


def test_out_and_program_reuse():
    x = torch.tensor([5, 0, 9, 9, 2], dtype=torch.int64, device="rbln")
    out = torch.empty(0, dtype=torch.int64, device="rbln")
    torch.histc(x, bins=10, min=0, max=9, out=out)
    assert torch.equal(out.cpu(), reference(x.cpu(), 10, 0, 9))
    _, delta = counters_delta(lambda: torch.histc(x, bins=10, min=0, max=9))
    assert delta.get("graph/compiles", 0) == 0 and delta.get("graph/runs", 0) == 1


def test_compiled_one_graph_on_the_device():
    # The MoE routing pattern (transformers' grouped_mm_experts_forward):
    # counts per expert of int32 ids, then their cumsum as offsets.
    def offsets(ids):
        counts = torch.histc(ids, bins=8, min=0, max=7)
        return torch.cumsum(counts, dim=0, dtype=torch.int32)

    ids = torch.randint(0, 8, (64,), generator=torch.Generator().manual_seed(0),
                        dtype=torch.int32)
    compiled = torch.compile(offsets, backend="rbln", dynamic=False, fullgraph=True,
                             options={"host_ops": "none"})
    got = compiled(ids.to("rbln"))
    want = torch.cumsum(reference(ids, 8, 0, 7), dim=0, dtype=torch.int32)
    assert torch.equal(got.cpu(), want)


def test_float_histc_still_takes_the_counted_cpu_fallback():
    x = torch.randn(64, 64, generator=torch.Generator().manual_seed(1)).half()
    got, delta = counters_delta(lambda: torch.histc(x.to("rbln"), 8, -1, 1))
    assert torch.equal(got.cpu(), torch.histc(x, 8, -1, 1))
    assert delta.get("dispatch/cpu_fallback/aten::histc", 0) == 1


def test_bad_arguments_raise_clearly():
    x = torch.tensor([1, 2], dtype=torch.int32, device="rbln")
    with pytest.raises(RuntimeError, match="bins must be > 0"):
        torch.histc(x, bins=0)
    with pytest.raises(RuntimeError, match="max must be larger than min"):
        torch.histc(x, bins=4, min=3, max=1)
    # The input is still intact on the device.
    assert x.cpu().tolist() == [1, 2]


def _half_cases():
    g = torch.Generator().manual_seed(3)
    x5 = torch.randn(2, 3, 6, 7, 5, generator=g)
    scores = torch.randn(4, 6, generator=g)
    labels = torch.tensor([[3, 0, -1, 1, 2, 2], [1, -1, 0, 0, 0, 0], [5, 4, 3, 2, 1, 0],
                           [0, 2, -1, 4, 4, 4]])
    image = torch.randn(2, 3, 10, 20, generator=g)
    F = torch.nn.functional
    return {
        "avg_pool3d": (lambda t: F.avg_pool3d(t, 3, stride=2, padding=1), [x5]),
        "avg_pool3d_divisor": (lambda t: F.avg_pool3d(t, 2, ceil_mode=True, divisor_override=3),
                               [x5]),
        "multi_margin_loss": (lambda t, w: F.multi_margin_loss(t, torch.tensor(
            [0, 5, 2, 2], device=t.device), p=2, margin=0.5, weight=w),
            [scores, torch.rand(6, generator=g)]),
        "multilabel_margin_loss": (lambda t: F.multilabel_margin_loss(
            t, labels.to(t.device), reduction="none"), [scores]),
        "interpolate_aa_down": (lambda t: F.interpolate(t, size=(4, 9), mode="bilinear",
                                                        antialias=True), [image]),
        "interpolate_aa_up": (lambda t: F.interpolate(t, scale_factor=1.7, mode="bilinear",
                                                      antialias=True, align_corners=True),
                              [image]),
    }


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("case", sorted(_half_cases()))
def test_half_ops_compute_in_float32_like_cuda(case, dtype):
    fn, inputs = _half_cases()[case]
    half = [t.to(dtype) for t in inputs]
    with pytest.raises(NotImplementedError):
        fn(*half)  # the CPU kernel rejects the dtype: why this exists
    want = fn(*(t.float() for t in half)).to(dtype)
    got, delta = counters_delta(lambda: fn(*(t.to("rbln") for t in half)))
    assert got.dtype == dtype and got.device.type == "rbln"
    assert delta.get("dispatch/cpu_fallback", 0) == 0
    # float32 arithmetic rounded once: within one rounding of the CPU's.
    torch.testing.assert_close(got.cpu(), want, atol=1e-3, rtol=8e-3 if dtype == torch.bfloat16
                               else 1e-3)
    compiled = torch.compile(fn, backend="rbln", dynamic=False, fullgraph=True,
                             options={"host_ops": "none"})
    torch.testing.assert_close(compiled(*(t.to("rbln") for t in half)).cpu(), want, atol=1e-3,
                               rtol=8e-3 if dtype == torch.bfloat16 else 1e-3)


def test_float32_aa_resize_compiles_like_the_cpu():
    x = torch.randn(1, 2, 9, 16, generator=torch.Generator().manual_seed(4))

    def fn(t):
        return torch.nn.functional.interpolate(t, size=(5, 6), mode="bilinear", antialias=True)

    compiled = torch.compile(fn, backend="rbln", dynamic=False, fullgraph=True,
                             options={"host_ops": "none"})
    torch.testing.assert_close(compiled(x.to("rbln")).cpu(), fn(x), atol=1e-5, rtol=1e-5)


def test_float32_multilabel_margin_loss_ignores_positions_after_minus_one():
    # torch._decomp's version adds the positions after the first -1 as class
    # 0 (rows 0, 1 and 3 here); the CPU's kernel, and ours, do not.
    g = torch.Generator().manual_seed(8)
    x = torch.randn(4, 6, generator=g)
    t = torch.tensor([[3, 0, -1, 1, 2, 2], [1, -1, 0, 0, 0, 0], [5, 4, 3, 2, 1, 0],
                      [0, 2, -1, 4, 4, 4]])
    for reduction in ("none", "mean", "sum"):
        def fn(a, b, reduction=reduction):
            return torch.nn.functional.multilabel_margin_loss(a, b, reduction=reduction)

        compiled = torch.compile(fn, backend="rbln", dynamic=False, fullgraph=True,
                                 options={"host_ops": "none"})
        torch.testing.assert_close(compiled(x.to("rbln"), t.to("rbln")).cpu(), fn(x, t))


@pytest.mark.parametrize("shape", [(128,), (5, 5)])  # aligned and not (SPEC H3)
def test_bool_abs_and_trace(shape):
    x = torch.rand(shape, generator=torch.Generator().manual_seed(5)) > 0.5
    got, delta = counters_delta(lambda: torch.abs(x.to("rbln")))
    assert got.dtype == torch.bool and torch.equal(got.cpu(), x)
    assert delta.get("dispatch/cpu_fallback", 0) == 0
    # abs.out and abs_ (rbln's C++ abs kernel, as abs).
    out, y = torch.empty(0, dtype=torch.bool, device="rbln"), x.to("rbln")
    _, delta = counters_delta(lambda: (torch.abs(y, out=out), y.abs_()))
    assert torch.equal(out.cpu(), x) and torch.equal(y.cpu(), x)
    assert delta.get("dispatch/cpu_fallback", 0) == 0
    soft = torch.nn.functional.softsign(x.to("rbln"))
    assert torch.equal(soft.cpu(), x.long() / (x.long() + 1))
    if len(shape) == 2:
        got, delta = counters_delta(lambda: torch.trace(x.to("rbln")))
        assert got.dtype == torch.int64 and got.item() == int(x.long().trace())
        assert delta.get("dispatch/cpu_fallback", 0) == 0
    compiled = torch.compile(lambda t: torch.nn.functional.softsign(t).sum() + t.abs().sum(),
                             backend="rbln", dynamic=False, fullgraph=True,
                             options={"host_ops": "none"})
    want = (x.long() / (x.long() + 1)).sum() + x.sum()
    torch.testing.assert_close(compiled(x.to("rbln")).cpu(), want)


def test_other_dtypes_keep_their_paths_and_gradients():
    # float32 avg_pool3d: the autograd kernel and the counted CPU fallback as
    # before; float16 abs: the compiled kernel, with its gradient.
    x = torch.randn(1, 1, 4, 4, 4, generator=torch.Generator().manual_seed(6))
    xr = x.to("rbln").requires_grad_()
    y, delta = counters_delta(lambda: torch.nn.functional.avg_pool3d(xr, 2))
    assert delta.get("dispatch/cpu_fallback", 0) >= 1
    y.sum().backward()
    torch.testing.assert_close(xr.grad.cpu(), torch.full_like(x, 1 / 8))
    h = torch.randn(64, generator=torch.Generator().manual_seed(7)).half().to("rbln")
    h.requires_grad_()
    a, delta = counters_delta(lambda: h.abs())
    assert delta.get("dispatch/compiled_runs", 0) == 1
    a.sum().backward()
    assert torch.equal(h.grad.cpu(), h.detach().cpu().sign())


def test_half_op_with_a_gradient_says_what_to_do():
    x = torch.randn(1, 1, 4, 4, 4).half().to("rbln").requires_grad_()
    with pytest.raises(NotImplementedError, match="cast the input to float32"):
        torch.nn.functional.avg_pool3d(x, 2)
    with torch.no_grad():
        assert torch.nn.functional.avg_pool3d(x, 2).shape == (1, 1, 2, 2, 2)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
