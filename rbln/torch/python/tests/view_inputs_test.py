"""View inputs of compiled-kernel ops: read from the base's device memory by
the program (the view replayed as its first node), except for comparisons,
which materialize them with .contiguous() (SPEC H7); G3's wrapper path."""
# spec: G3, H7

import sys

import pytest
import torch
import torch.nn.functional as F
from rbln_test_util import delta

# Every device-to-device copy the DMA engine makes (contiguous or strided).
_D2D = ("runtime/dma_d2d_copies", "runtime/dma_d2d_strided_copies")


def d2d_copies(before, after):
    return sum(delta(before, after, k) for k in _D2D)


def gen(seed):
    return torch.Generator().manual_seed(seed)


# (name, base shape, view) -- views of a contiguous base at storage offset 0
# whose last dim stays a multiple of 64 (so the H3/H6 checks pass).
VIEWS = [
    ("transpose", (128, 64), lambda t: t.t()),
    ("permute", (2, 64, 128), lambda t: t.permute(1, 0, 2)),
    ("step_slice", (64, 256), lambda t: t[:, ::2]),
    ("expand", (1, 128), lambda t: t.expand(64, 128)),
    ("select_column_block", (4, 64, 128), lambda t: t[:, 0]),
]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name,shape,view", VIEWS, ids=[v[0] for v in VIEWS])
def test_non_comparison_ops_read_views_without_a_copy(dtype, name, shape, view):
    # spec: H7, G3 -- add, mul, silu and softmax of a view equal the CPU's,
    # and no device-to-device copy materializes the view.
    base = torch.randn(*shape, generator=gen(1)).to(dtype)
    rbase = base.to("rbln")
    v_cpu = view(base)
    other = torch.randn(*v_cpu.shape, generator=gen(2)).to(dtype)
    rother = other.to("rbln")
    rv = view(rbase)
    assert not rv.is_contiguous() and rv.storage_offset() == 0
    ops = {
        "add": lambda a, b: a + b,
        "mul": lambda a, b: a * b,
        "silu": lambda a, b: F.silu(a),
        "softmax": lambda a, b: torch.softmax(a, dim=-1),
    }
    for op, fn in ops.items():
        fn(rv, rother)  # The first call compiles.
        before = torch.rbln.counters()
        got = fn(rv, rother)
        after = torch.rbln.counters()
        torch.testing.assert_close(got.cpu(), fn(v_cpu, other), msg=op)
        assert delta(before, after, "dispatch/compiled_runs") == 1, op
        assert d2d_copies(before, after) == 0, op


def test_matmul_of_a_transposed_weight_reads_the_weight_in_place():
    # spec: H7 -- x @ w.t() (what Linear does) reads w from its storage.
    x = torch.randn(64, 128, generator=gen(3)).half()
    w = torch.randn(64, 128, generator=gen(4)).half()
    rx, rw = x.to("rbln"), w.to("rbln")
    rx @ rw.t()
    before = torch.rbln.counters()
    got = rx @ rw.t()
    after = torch.rbln.counters()
    torch.testing.assert_close(got.cpu().float(), x.float() @ w.float().t(), atol=0.1, rtol=1e-2)
    assert delta(before, after, "dispatch/compiled_runs") == 1
    assert d2d_copies(before, after) == 0


@pytest.mark.parametrize("op", ["eq", "ne", "lt", "le", "gt", "ge"])
def test_comparisons_materialize_view_inputs(op):
    # spec: H7 -- comparison ops make a view input contiguous first: one
    # strided device copy per view input, results equal the CPU's.
    a = torch.randint(-3, 3, (128, 64), generator=gen(5)).half()
    b = torch.randint(-3, 3, (64, 128), generator=gen(6)).half()
    ra, rb = a.to("rbln"), b.to("rbln")
    fn = getattr(torch, op)
    fn(ra.t(), rb)
    before = torch.rbln.counters()
    got = fn(ra.t(), rb)
    after = torch.rbln.counters()
    assert torch.equal(got.cpu(), fn(a.t(), b))
    assert delta(before, after, "dispatch/compiled_runs") == 1
    assert delta(before, after, "runtime/dma_d2d_strided_copies") == 1


def test_view_inputs_take_the_wrapper_path_and_reuse_the_program():
    # spec: G3 -- a view input re-enters the wrapper every call (no warm
    # entry) and reuses the program: no compile after the first call.
    base = torch.randn(128, 64, generator=gen(7)).half().to("rbln")
    y = torch.randn(64, 128, generator=gen(8)).half().to("rbln")
    base.t() * y
    before = torch.rbln.counters()
    for _ in range(4):
        z = base.t() * y
    after = torch.rbln.counters()
    assert delta(before, after, "dispatch/wrapper_path") == 4
    assert delta(before, after, "dispatch/warm_hits") == 0
    assert delta(before, after, "compiler/compiles") == 0
    assert delta(before, after, "compiler/cache_hits") == 4
    assert d2d_copies(before, after) == 0
    torch.testing.assert_close(z.cpu(), base.cpu().t() * y.cpu())


def test_writes_to_the_base_are_seen_by_the_next_call():
    # spec: G3 -- the program reads the base's current device bytes, not a
    # copy made earlier.
    base = torch.ones(128, 64, dtype=torch.float16, device="rbln")
    y = torch.ones(64, 128, dtype=torch.float16, device="rbln")
    first = (base.t() + y).cpu()
    base.mul_(3)
    second = (base.t() + y).cpu()
    assert torch.equal(first, torch.full((64, 128), 2.0, dtype=torch.float16))
    assert torch.equal(second, torch.full((64, 128), 4.0, dtype=torch.float16))


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
