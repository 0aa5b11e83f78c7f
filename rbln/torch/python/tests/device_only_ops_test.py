"""Integer histc on rbln, as CUDA computes it (issue 30): the CPU kernel
rejects integer input, so these calls run as device programs, eagerly and
compiled, and are checked against the CPU's histc of the float64-cast input
(the same bins for integers of this size)."""
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


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
