"""Grouped GEMM in compiled graphs (issue 30 item 2): torch._grouped_mm and
transformers::grouped_mm_fallback, the two ops transformers' MoE experts
multiply with, compile to one device program with no host op; offsets are
data (a cumsum of the routing), so one program serves every routing. The
compiler multiplies each group's rows by its weight only (oneDNN, weights
read in place, transposed ones too: transformers passes
weight.transpose(-2, -1)).
Checked against PyTorch's CPU torch._grouped_mm (float32 for the dtypes its
CPU kernel rejects, rounded once: opmath)."""
# spec: I2, J4, J6

import os

# Read at process start (SPEC I6): a compile failure raises instead of
# running the graph on the CPU, so every pass here is a device run.
os.environ["TORCH_RBLN_DISABLE_FALLBACK"] = "compile_error"

import sys  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
import transformers.integrations.moe  # noqa: E402,F401 -- registers transformers' op

# Group ends: empty groups (first, middle, last), rows past the last offset,
# every row in the first group, no rows at all.
OFFSETS = [(2, 2, 5, 8), (0, 3, 3, 6), (8, 8, 8, 8), (0, 0, 0, 0), (1, 4, 7, 7)]
TOL = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 2e-2}


def fallback_op(x, w, offs):
    return torch.ops.transformers.grouped_mm_fallback(x, w, offs) * 2


def aten_op(x, w, offs):
    return torch._grouped_mm(x, w, offs=offs) * 2


def reference(x, w, offs):
    """CPU torch._grouped_mm; rows past the last offset are 0 (the CPU kernel
    leaves them unwritten)."""
    dtype = x.dtype
    if dtype != torch.bfloat16:  # The CPU kernel takes bfloat16 and float32.
        x, w = x.float(), w.float()
    out = (torch._grouped_mm(x, w, offs=offs) * 2).to(dtype)
    out[int(offs[-1]):] = 0
    return out


def run_compiled(fn, *args):
    torch._dynamo.reset()
    before = torch.rbln.counters()
    out = torch.compile(fn, backend="rbln", dynamic=False,
                        options={"host_ops": "none"})(*[a.to("rbln") for a in args])
    after = torch.rbln.counters()
    delta = {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}
    return out.cpu(), delta


def inputs(dtype, seed=0, rows=8):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(rows, 64, generator=g).to(dtype),
            torch.randn(4, 64, 48, generator=g).to(dtype))


# At most as many rows as groups (decode).
FEW_ROWS_OFFSETS = [(1, 1, 3, 4), (0, 2, 3, 3)]


@pytest.mark.parametrize("ends", FEW_ROWS_OFFSETS, ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_grouped_mm_with_few_rows_matches_cpu(dtype, ends):
    x, w = inputs(dtype, rows=4)
    offs = torch.tensor(ends, dtype=torch.int32)
    got, delta = run_compiled(fallback_op, x, w, offs)
    assert delta.get("graph/host_ops", 0) == 0 and delta.get("graph/cpu_fallback", 0) == 0
    torch.testing.assert_close(got, reference(x, w, offs), atol=TOL[dtype], rtol=TOL[dtype])


@pytest.mark.parametrize("ends", OFFSETS, ids=str)
@pytest.mark.parametrize("fn, dtype", [
    (fallback_op, torch.float32), (fallback_op, torch.float16),
    (fallback_op, torch.bfloat16), (aten_op, torch.bfloat16)],
    ids=["fallback-f32", "fallback-f16", "fallback-bf16", "aten-bf16"])
def test_grouped_mm_compiles_to_one_program_matching_cpu(fn, dtype, ends):
    x, w = inputs(dtype)
    offs = torch.tensor(ends, dtype=torch.int32)
    got, delta = run_compiled(fn, x, w, offs)
    assert got.dtype == dtype and got.shape == (8, 48)
    assert delta.get("graph/host_ops", 0) == 0 and delta.get("graph/cpu_fallback", 0) == 0
    torch.testing.assert_close(got, reference(x, w, offs), atol=TOL[dtype], rtol=TOL[dtype])


def transposed_fallback_op(x, w, offs):
    return fallback_op(x, w.transpose(-2, -1), offs)


def transposed_aten_op(x, w, offs):
    return aten_op(x, w.transpose(-2, -1), offs)


@pytest.mark.parametrize("ends", OFFSETS[:2], ids=str)
@pytest.mark.parametrize("fn, dtype", [
    (transposed_fallback_op, torch.float32), (transposed_aten_op, torch.bfloat16)],
    ids=["fallback-f32", "aten-bf16"])
def test_grouped_mm_with_transposed_weight_matches_cpu(fn, dtype, ends):
    x, w = inputs(dtype)
    wt = w.transpose(-2, -1).contiguous()  # stored [G, N, K], as nn.Linear's
    offs = torch.tensor(ends, dtype=torch.int32)
    got, delta = run_compiled(fn, x, wt, offs)
    assert delta.get("graph/host_ops", 0) == 0 and delta.get("graph/cpu_fallback", 0) == 0
    torch.testing.assert_close(got, reference(x, w, offs), atol=TOL[dtype], rtol=TOL[dtype])


def test_one_program_serves_every_routing():
    """The offsets are program input data: new routings reuse the program."""
    x, w = inputs(torch.float16)
    compiled = torch.compile(fallback_op, backend="rbln", dynamic=False,
                             options={"host_ops": "none"})
    torch._dynamo.reset()
    compiled(x.to("rbln"), w.to("rbln"), torch.tensor(OFFSETS[0], dtype=torch.int32, device="rbln"))
    before = torch.rbln.counters()
    for ends in OFFSETS[1:]:
        offs = torch.tensor(ends, dtype=torch.int32)
        got = compiled(x.to("rbln"), w.to("rbln"), offs.to("rbln")).cpu()
        torch.testing.assert_close(got, reference(x, w, offs), atol=1e-2, rtol=1e-2)
    after = torch.rbln.counters()
    assert after.get("graph/compiles", 0) == before.get("graph/compiles", 0)


@pytest.mark.parametrize("fn", [fallback_op, transposed_fallback_op], ids=["plain", "transposed"])
def test_expert_weights_are_packed_once(fn):
    """Expert weights that are program inputs are packed into oneDNN's
    blocked layout once and reused by later calls, as a Linear's weight is
    (packed_weights.h), in a program whose only library call is the grouped
    GEMM (before, such a program registered no inputs for the packing and
    every call read every expert's weight unpacked)."""
    def hits():
        return torch.rbln.counters().get("compiler/packed_weights/hits", 0)

    x, w = inputs(torch.bfloat16, rows=64)
    w0 = w[0].contiguous().to("rbln")
    if fn is transposed_fallback_op:
        w = w.transpose(-2, -1).contiguous()
    offs = torch.tensor((10, 30, 30, 64), dtype=torch.int32)
    xd, wd, od = x.to("rbln"), w.to("rbln"), offs.to("rbln")
    # Whether oneDNN takes a packed layout depends on the CPU (brgemm): a
    # plain GEMM on one expert's weight says whether this one does.
    torch._dynamo.reset()
    plain = torch.compile(lambda a, b: a @ b, backend="rbln", dynamic=False)
    for _ in range(3):
        before = hits()
        plain(xd, w0)
    if hits() == before:
        pytest.skip("oneDNN takes no packed weights on this CPU")
    compiled = torch.compile(fn, backend="rbln", dynamic=False, options={"host_ops": "none"})
    compiled(xd, wd, od)
    compiled(xd, wd, od)
    before = hits()
    got = compiled(xd, wd, od).cpu()
    assert hits() > before
    want = reference(x, w.transpose(-2, -1) if fn is transposed_fallback_op else w, offs)
    torch.testing.assert_close(got, want, atol=TOL[torch.bfloat16], rtol=TOL[torch.bfloat16])


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
