"""torch._grouped_mm in eager mode on rbln (issue 30 item 2): a device
program (no CPU fallback), forward and backward, against PyTorch's CPU
_grouped_mm on the same values (float32 for the reference, rounded once:
opmath); float16 and float32 too, as the CPU kernel takes them (transformers
calls it in the model's dtype)."""
# spec: E5, E6, I2

import sys

import pytest
import torch

import torch_rbln  # noqa: F401

TOL = dict(atol=2e-2, rtol=2e-2)
OFFSETS = [(2, 2, 5, 8), (0, 3, 3, 6), (8, 8, 8, 8)]


def counted(fn):
    before = torch.rbln.counters()
    out = fn()
    after = torch.rbln.counters()
    return out, {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}


def operands(seed, transposed, dtype=torch.bfloat16):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(8, 64, generator=g).to(dtype)
    w = torch.randn(4, 48, 64, generator=g).to(dtype)  # [G, N, K]
    return x, (w if transposed else w.transpose(-2, -1).contiguous())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("transposed", [False, True], ids=["plain", "transposed"])
@pytest.mark.parametrize("ends", OFFSETS, ids=str)
def test_forward_is_a_device_program_matching_cpu(ends, transposed, dtype):
    x, w = operands(0, transposed, dtype)
    offs = torch.tensor(ends, dtype=torch.int32)

    def mm(x, w, offs):
        return torch._grouped_mm(x, w.transpose(-2, -1) if transposed else w, offs=offs)

    got, delta = counted(lambda: mm(x.to("rbln"), w.to("rbln"), offs.to("rbln")).cpu())
    assert not any(k.startswith("dispatch/cpu_fallback") for k in delta), delta
    want = mm(x.float(), w.float(), offs).to(dtype)
    want[ends[-1]:] = 0  # the CPU leaves rows in no group unwritten
    assert got.dtype == dtype
    torch.testing.assert_close(got, want, **TOL)


def test_backward_matches_cpu():
    """ATen's derivative: the input's gradient through the transposed weight,
    the weight's through the 2-D x 2-D form (K by group), both on rbln."""
    x, w = operands(1, False)
    offs = torch.tensor((2, 5, 5, 8), dtype=torch.int32)
    grad = torch.randn(8, 48).to(torch.bfloat16)

    def grads(device):
        xd = x.to(device).requires_grad_()
        wd = w.to(device).requires_grad_()
        torch._grouped_mm(xd, wd, offs=offs.to(device)).backward(grad.to(device))
        return xd.grad.cpu(), wd.grad.cpu()

    (gx, gw), delta = counted(lambda: grads("rbln"))
    assert not any(k.startswith("dispatch/cpu_fallback/aten::_grouped_mm") for k in delta), delta
    wx, ww = grads("cpu")
    torch.testing.assert_close(gx, wx, **TOL)
    torch.testing.assert_close(gw, ww, **TOL)


def test_one_program_serves_every_routing():
    x, w = operands(2, False)
    torch._grouped_mm(x.to("rbln"), w.to("rbln"), offs=torch.tensor(OFFSETS[0], dtype=torch.int32,
                                                                     device="rbln"))
    before = torch.rbln.counters().get("graph/compiles", 0)
    for ends in OFFSETS[1:]:
        offs = torch.tensor(ends, dtype=torch.int32)
        got = torch._grouped_mm(x.to("rbln"), w.to("rbln"), offs=offs.to("rbln")).cpu()
        want = torch._grouped_mm(x, w, offs=offs)
        want[ends[-1]:] = 0
        torch.testing.assert_close(got, want, **TOL)
    assert torch.rbln.counters().get("graph/compiles", 0) == before


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
