"""View ops on rbln are metadata-only and share storage (SPEC K1); out=
arguments of compiled ops (SPEC K4)."""
# spec: K1, K4

import sys
import warnings

import pytest
import torch

from rbln_test_util import delta

# Every transfer or device copy the runtime can make.
_DATA_MOVEMENT = (
    "runtime/dma_h2d_copies",
    "runtime/dma_d2h_copies",
    "runtime/dma_d2d_copies",
    "runtime/dma_d2d_strided_copies",
    "runtime/host_bounce_copies",
    "runtime/executions",
    "storage/uploads",
    "storage/downloads",
    "storage/host_reads",
    "storage/host_writes",
)


def moved(before, after):
    return {k: delta(before, after, k) for k in _DATA_MOVEMENT if delta(before, after, k)}


# (name, base shape, view op). Each is applied to an rbln base and a CPU base.
VIEW_OPS = [
    ("view", (4, 6, 8), lambda t: t.view(24, 8)),
    ("reshape_contiguous", (4, 6, 8), lambda t: t.reshape(6, 32)),
    ("as_strided", (4, 6, 8), lambda t: t.as_strided((3, 4), (16, 2), 5)),
    ("transpose", (4, 6, 8), lambda t: t.transpose(0, 2)),
    ("permute", (4, 6, 8), lambda t: t.permute(2, 0, 1)),
    ("t", (6, 8), lambda t: t.t()),
    ("narrow", (4, 6, 8), lambda t: t.narrow(1, 2, 3)),
    ("select", (4, 6, 8), lambda t: t.select(1, 4)),
    ("slice", (4, 6, 8), lambda t: t[1:3, ::2, 3:]),
    ("index_int", (4, 6, 8), lambda t: t[2]),
    ("expand", (1, 6, 8), lambda t: t.expand(5, 6, 8)),
    ("squeeze", (4, 1, 8), lambda t: t.squeeze(1)),
    ("unsqueeze", (4, 6, 8), lambda t: t.unsqueeze(2)),
    ("unflatten", (4, 48), lambda t: t.unflatten(1, (6, 8))),
    ("flatten_contiguous", (4, 6, 8), lambda t: t.flatten(1)),
    ("diagonal", (4, 6, 8), lambda t: t.diagonal(0, 1, 2)),
    ("unfold", (4, 6, 8), lambda t: t.unfold(2, 3, 2)),
    ("movedim", (4, 6, 8), lambda t: t.movedim(0, -1)),
    ("split", (4, 6, 8), lambda t: t.split(2, dim=1)[1]),
    ("chunk", (4, 6, 8), lambda t: t.chunk(2, dim=2)[1]),
    ("unbind", (4, 6, 8), lambda t: t.unbind(0)[3]),
    ("view_dtype", (4, 6, 8), lambda t: t.view(torch.int16)),
    ("real_of_real", (4, 6, 8), lambda t: t.real),
    ("detach", (4, 6, 8), lambda t: t.detach()),
    ("alias", (4, 6, 8), lambda t: torch.ops.aten.alias(t)),
]


@pytest.mark.parametrize("name,shape,view_op", VIEW_OPS, ids=[v[0] for v in VIEW_OPS])
def test_view_ops_are_metadata_only_and_share_storage(name, shape, view_op):
    # spec: K1 -- the view has the CPU view's sizes, strides and offset, the
    # base's storage, no data moved to make it, and sees writes to the base.
    cpu = torch.arange(torch.Size(shape).numel(), dtype=torch.float16).reshape(shape)
    base = cpu.to("rbln")
    base.cpu()  # Settle the base's storage state before counting.
    before = torch.rbln.counters()
    v = view_op(base)
    after = torch.rbln.counters()
    want = view_op(cpu)
    assert v.device == base.device
    assert moved(before, after) == {}, name
    assert v.untyped_storage().data_ptr() == base.untyped_storage().data_ptr(), name
    assert (v.shape, v.stride(), v.storage_offset(), v.dtype) == (
        want.shape, want.stride(), want.storage_offset(), want.dtype), name
    assert torch.equal(v.cpu(), want), name
    # A write to the base is seen through the view.
    base.copy_(cpu.neg().to("rbln"))
    assert torch.equal(v.cpu(), view_op(cpu.neg())), name


def test_writes_through_a_view_reach_the_base():
    # spec: K1 -- views alias the base's device memory both ways.
    cpu = torch.zeros(4, 6, 8, dtype=torch.float16)
    base = cpu.to("rbln")
    views = [
        (lambda t: t.transpose(0, 2)[1], 1.0),
        (lambda t: t.permute(1, 2, 0)[:, ::3], 2.0),
        (lambda t: t.select(1, 4), 3.0),
        (lambda t: t.unfold(2, 2, 4), 4.0),
        (lambda t: t.diagonal(0, 1, 2), 5.0),
    ]
    for view_op, value in views:
        view_op(base).copy_(torch.full(view_op(cpu).shape, value, dtype=torch.float16))
        view_op(cpu).fill_(value)
        assert torch.equal(base.cpu(), cpu)


# --- K4: out= ---------------------------------------------------------------

OUT_OPS = [
    ("add", lambda a, b, out: torch.add(a, b, out=out)),
    ("sub", lambda a, b, out: torch.sub(a, b, alpha=2, out=out)),
    ("mul", lambda a, b, out: torch.mul(a, b, out=out)),
    ("div", lambda a, b, out: torch.div(a, b, out=out)),
]


def out_inputs(dtype):
    g = torch.Generator().manual_seed(11)
    a = torch.randn(64, 128, generator=g).to(dtype)
    b = (torch.rand(64, 128, generator=g) + 0.5).to(dtype)
    return a, b


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name,fn", OUT_OPS, ids=[o[0] for o in OUT_OPS])
def test_contiguous_out_is_written_in_place(dtype, name, fn):
    # spec: K4 -- a contiguous out= of the result's shape and dtype is the
    # program's output buffer: no temporary, no copy.
    a, b = out_inputs(dtype)
    ra, rb = a.to("rbln"), b.to("rbln")
    out = torch.empty(64, 128, dtype=dtype, device="rbln")
    fn(ra, rb, out)  # Compiles.
    ptr = out.data_ptr()
    before = torch.rbln.counters()
    res = fn(ra, rb, out)
    after = torch.rbln.counters()
    assert res.data_ptr() == ptr == out.data_ptr()
    assert delta(before, after, "dispatch/out_in_place") == 1
    assert delta(before, after, "dispatch/out_via_temporary") == 0
    assert delta(before, after, "runtime/dma_d2d_copies") == 0
    assert delta(before, after, "runtime/dma_d2d_strided_copies") == 0
    torch.testing.assert_close(out.cpu(), fn(a, b, torch.empty(64, 128, dtype=dtype)))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name,fn", OUT_OPS, ids=[o[0] for o in OUT_OPS])
@pytest.mark.parametrize("layout", ["transposed", "sliced"])
def test_non_contiguous_out_gets_a_temporary_and_a_copy(dtype, name, fn, layout):
    # spec: K4 -- a transposed or sliced out= gets the right values through
    # one temporary and one strided device copy; the bytes around a sliced
    # out stay as they were.
    a, b = out_inputs(dtype)
    ra, rb = a.to("rbln"), b.to("rbln")
    if layout == "transposed":
        holder_cpu = torch.full((128, 64), 7.0, dtype=dtype)
        pick = lambda t: t.t()  # noqa: E731
    else:
        holder_cpu = torch.full((64, 256), 7.0, dtype=dtype)
        pick = lambda t: t[:, ::2]  # noqa: E731
    holder = holder_cpu.to("rbln")
    out = pick(holder)
    assert not out.is_contiguous()
    fn(ra, rb, out)  # Compiles.
    before = torch.rbln.counters()
    res = fn(ra, rb, out)
    after = torch.rbln.counters()
    assert res.data_ptr() == out.data_ptr()
    assert delta(before, after, "dispatch/out_via_temporary") == 1
    assert delta(before, after, "dispatch/out_in_place") == 0
    assert delta(before, after, "runtime/dma_d2d_strided_copies") == 1
    want = holder_cpu.clone()
    fn(a, b, pick(want))
    torch.testing.assert_close(holder.cpu(), want)


def test_out_resize_follows_the_cpu():
    # spec: K4 -- an out= of the wrong shape is resized as on the CPU: an
    # empty one silently, a non-empty one with PyTorch's resize warning.
    a, b = out_inputs(torch.float16)
    ra, rb = a.to("rbln"), b.to("rbln")
    empty = torch.empty(0, dtype=torch.float16, device="rbln")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.add(ra, rb, out=empty)
    assert empty.shape == (64, 128)
    torch.testing.assert_close(empty.cpu(), a + b)
    wrong = torch.empty(3, 64, dtype=torch.float16, device="rbln")
    with pytest.warns(UserWarning, match="An output with one or more elements was resized"):
        torch.add(ra, rb, out=wrong)
    assert wrong.shape == (64, 128)
    torch.testing.assert_close(wrong.cpu(), a + b)


def test_out_aliasing_an_input_matches_the_cpu():
    # spec: K4 -- out= that is also an input (x = x + y written as out=x)
    # gives the CPU's result.
    a, b = out_inputs(torch.float16)
    ra, rb = a.to("rbln"), b.to("rbln")
    torch.mul(ra, rb, out=ra)
    torch.testing.assert_close(ra.cpu(), a * b)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
