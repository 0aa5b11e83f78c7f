"""torch.compile(backend="rbln"): indexing and data movement as device code.

Advanced indexing, gathers/scatters, pads, flips and views that Dynamo's
core ATen decompositions produce compile into one device program with no
host op, match the CPU, and check their indices at run time (SPEC P8).
"""
# spec: J1, J6, P8

import sys

import pytest
import torch
import torch._dynamo
import torch.nn.functional as F

import torch_rbln  # noqa: F401
from rbln_test_util import fresh_dynamo  # noqa: F401 (fixture)

DEV = "rbln:0"
DTYPES = [torch.float16, torch.bfloat16]


# Every test on fresh Dynamo caches (rbln_test_util).
pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def compiled(fn):
    return torch.compile(fn, backend="rbln", dynamic=False, fullgraph=True,
                         options={"host_ops": "none"})


def one_program_ops():
    """The ops of the only compiled graph, which must be one device program."""
    (graph,) = torch.rbln.compiled_programs()
    report = graph.inspect()
    assert report["host_ops"] == []
    (program,) = report["programs"]
    return program["ops"]


def indexing(x, i, j, src, mask):
    a = x[:, :, i]                       # index, None first
    b = x[j, :, i.view(1, -1)]           # indexed dims apart: broadcast first
    c = x.index_put((j,), src[: j.numel()], accumulate=True)
    d = x.gather(2, j.view(1, 1, -1).expand(2, 3, -1))
    e = torch.zeros_like(x).scatter_add(1, j.view(1, -1, 1).expand(2, -1, 4), src[:2, : j.numel()])
    f = x.masked_fill(mask, 0).flip(0, -1)
    g = x.clone()
    g[mask] = 1.5                        # index_put with a boolean mask
    return a, b, c, d, e, f, g


@pytest.mark.parametrize("dtype", DTYPES)
def test_indexing_compiles_to_one_device_program(dtype):
    x = torch.randn(2, 3, 4, dtype=dtype)
    i = torch.tensor([3, -1, 0])         # negative indices count from the end
    j = torch.tensor([1, 0, 1])          # repeated targets accumulate
    src = torch.randn(3, 3, 4, dtype=dtype)
    mask = x > 0.5
    args = (x, i, j, src, mask)
    got = compiled(indexing)(*[a.to(DEV) for a in args])
    want = indexing(*args)
    for g, w in zip(got, want):
        torch.testing.assert_close(g.cpu(), w, atol=1e-2, rtol=1e-2)
    ops = one_program_ops()
    for op in ("index", "index_put", "gather", "scatter_add", "flip"):
        assert op in ops, ops


def movement(x, w, idx, offsets, sidx):
    return (
        F.pad(x, (1, 2, 2, 1), mode="reflect"),
        F.pad(x, (2, 1, 0, 1), mode="replicate"),
        F.pad(x, (-1, 2, 1, -1), value=0.5),
        x.repeat(2, 1, 1, 2),
        x.unfold(-1, 2, 1),
        torch.diagonal(x, offset=1, dim1=-2, dim2=-1),
        torch.rot90(x, 1, (2, 3)),
        x.scatter_reduce(3, sidx.expand(2, 3, 4, 5), x, "amax", include_self=False),
        F.embedding_bag(idx, w, offsets, mode="mean"),
    )


@pytest.mark.parametrize("dtype", DTYPES)
def test_pads_views_and_embedding_bag_compile_to_one_device_program(dtype):
    x = torch.randn(2, 3, 4, 5, dtype=dtype)
    w = torch.randn(10, 3, dtype=dtype)
    idx = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9])
    offsets = torch.tensor([0, 4, 4])
    sidx = torch.tensor([[[[0, 1, 0, 2, 1]]]])
    args = (x, w, idx, offsets, sidx)
    got = compiled(movement)(*[a.to(DEV) for a in args])
    want = movement(*args)
    for g, e in zip(got, want):
        torch.testing.assert_close(g.cpu(), e, atol=1e-2, rtol=1e-2)
    ops = one_program_ops()
    for op in ("index", "constant_pad_nd", "repeat", "unfold", "diagonal", "flip",
               "scatter_reduce", "_embedding_bag_forward_only"):
        assert op in ops, ops


def test_out_of_range_indices_raise():
    # spec: P8 -- checked in the kernel: IndexError naming the op and range,
    # and the same program runs again with good indices.
    x = torch.randn(3, 4, dtype=torch.float16).to(DEV)
    f = compiled(lambda x, i: x.gather(1, i) * 2)
    good = torch.tensor([[0, 3], [1, 2], [3, 3]])
    with pytest.raises(IndexError, match=r"gather .*index 4 is not in the valid range \[0, 4\)"):
        f(x, torch.tensor([[0, 4], [1, 2], [3, 3]]).to(DEV))
    torch.testing.assert_close(f(x, good.to(DEV)).cpu(), x.cpu().gather(1, good) * 2)

    g = compiled(lambda x, i: x[:, i] + 1)
    with pytest.raises(IndexError, match=r"index -5 is not in the valid range \[-4, 4\)"):
        g(x, torch.tensor([-5, 1]).to(DEV))
    torch.testing.assert_close(g(x, torch.tensor([-4, 3]).to(DEV)).cpu(),
                               x.cpu()[:, [-4, 3]] + 1)


def test_as_strided_of_an_argument_reads_its_storage():
    # spec: K1, J1 -- as_strided addresses the argument's storage, as on the
    # CPU: an explicit storage_offset is absolute (also before the view and
    # past it, and the same graph called with a view at another offset,
    # which Dynamo does not guard on, reads the right elements), the default
    # offset is the argument's own, and a non-contiguous argument keeps its
    # strides.
    base = torch.randn(20, dtype=torch.float16)
    on_dev = base.to(DEV)

    for offset in (7, 2, 14):
        def strided(x, offset=offset):
            return torch.as_strided(x, (2, 2), (1, 2), storage_offset=offset) * 2

        f = compiled(strided)
        for start in (5, 3, 6):
            torch.testing.assert_close(f(on_dev[start:start + 10]).cpu(),
                                       strided(base[start:start + 10]))

    def default_offset(x):
        return torch.as_strided(x, (2, 2), (1, 3)) + 1

    f = compiled(default_offset)
    for start in (1, 3):
        torch.testing.assert_close(f(on_dev[start:start + 12].view(3, 4).t()).cpu(),
                                   default_offset(base[start:start + 12].view(3, 4).t()))


def test_data_dependent_shapes_stay_host_ops():
    # spec: J6 -- unique's output size depends on the data.
    def uniq(x):
        return torch.unique(x * 2) + 1

    torch._dynamo.config.capture_dynamic_output_shape_ops = True
    try:
        x = torch.tensor([3.0, 1.0, 3.0, 2.0])
        got = torch.compile(uniq, backend="rbln", dynamic=False)(x.to(DEV))
        torch.testing.assert_close(got.cpu(), uniq(x))
        (graph,) = torch.rbln.compiled_programs()
        reasons = {h["op"]: h["host_op_reason"] for h in graph.inspect()["host_ops"]}
        assert set(reasons.values()) == {"data-dependent output shape"}, reasons
    finally:
        torch._dynamo.config.capture_dynamic_output_shape_ops = False


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
