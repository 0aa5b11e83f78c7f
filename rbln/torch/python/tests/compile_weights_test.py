"""Compiled GEMMs keep their weights packed between calls (oneDNN's blocked
layouts, rbln/compiler/kernels/packed_weights.h) and must still see every write to
them: in-place updates, writes through .data (which bypass autograd's
version counter), load_state_dict and optimizer steps all reach the next
call. The runtime's per-storage content version is what the cache checks."""
# spec: J1, P9

import sys

import pytest
import torch
import torch._dynamo

import torch_rbln  # noqa: F401
from rbln_test_util import fresh_dynamo, strict_fresh_dynamo  # noqa: F401 (fixtures)

DEV = "rbln:0"
TOL = {
    torch.float16: dict(atol=2e-2, rtol=2e-2),
    torch.bfloat16: dict(atol=5e-2, rtol=5e-2),
    torch.float32: dict(atol=1e-4, rtol=1e-4),
}


# Every test on fresh Dynamo caches, failing on a graph the compiler cannot take (rbln_test_util).
pytestmark = pytest.mark.usefixtures("strict_fresh_dynamo")


def packs():
    return torch.rbln.counters().get("compiler/packed_weights/packs", 0)


def hits():
    return torch.rbln.counters().get("compiler/packed_weights/hits", 0)


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(64, 256)
        self.down = torch.nn.Linear(256, 48, bias=False)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


def make(dtype):
    torch.manual_seed(0)
    cpu = Mlp().to(dtype)
    dev = Mlp().to(dtype)
    dev.load_state_dict(cpu.state_dict())
    dev = dev.to(DEV)
    return cpu, dev, torch.compile(dev, backend="rbln", dynamic=False, fullgraph=True)


def check(cpu, compiled, dtype, calls=3):
    with torch.no_grad():
        for i in range(calls):
            x = torch.randn(32, 64, dtype=dtype) * (i + 1)
            torch.testing.assert_close(compiled(x.to(DEV)).cpu(), cpu(x), **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_weights_are_packed_once_and_reused(dtype):
    cpu, _, compiled = make(dtype)
    before_packs, before_hits = packs(), hits()
    check(cpu, compiled, dtype, calls=4)
    # Whether oneDNN takes a packed layout depends on the CPU (brgemm); when
    # it does, the first call packs the weights for itself alone, the second
    # packs copies that are kept, the rest reuse them.
    new_packs, new_hits = packs() - before_packs, hits() - before_hits
    if new_packs:
        assert new_hits >= new_packs, (new_packs, new_hits)


def packed_bytes():
    return torch.rbln.counters().get("compiler/packed_weights/bytes", 0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_empty_cache_drops_packed_weights(dtype):
    # spec: E1 -- the packed copies are a cache of the compiled programs:
    # empty_cache() frees them, and the next calls pack again.
    cpu, _, compiled = make(dtype)
    before_packs = packs()
    check(cpu, compiled, dtype)
    if packs() == before_packs:
        pytest.skip("oneDNN takes no packed weights on this CPU")
    assert packed_bytes() > 0
    torch.rbln.empty_cache()
    assert packed_bytes() == 0
    repacked = packs()
    check(cpu, compiled, dtype)
    assert packs() > repacked


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("how", ["in_place", "data", "load_state_dict", "set_"])
def test_weight_writes_reach_the_next_call(dtype, how):
    cpu, dev, compiled = make(dtype)
    check(cpu, compiled, dtype)  # packed by now
    with torch.no_grad():
        if how == "in_place":
            for m in (cpu, dev):
                m.up.weight.mul_(-2)
                m.down.weight.add_(0.5)
        elif how == "data":
            new = torch.randn(48, 256, dtype=dtype)
            cpu.down.weight.data.copy_(new)
            dev.down.weight.data.copy_(new.to(DEV))  # no autograd version bump
        elif how == "load_state_dict":
            other = Mlp().to(dtype)
            cpu.load_state_dict(other.state_dict())
            dev.load_state_dict(other.state_dict())
        else:
            # Only part of a weight written: one row.
            row = torch.randn(256, dtype=dtype)
            cpu.down.weight[7].copy_(row)
            dev.down.weight[7].copy_(row.to(DEV))
    check(cpu, compiled, dtype)


def test_optimizer_steps_reach_the_next_call():
    # Training: the weights change at every step, so nothing is packed for
    # nothing (first sight of a version reads it as stored) and every
    # forward uses the latest weights.
    dtype = torch.float32
    cpu, dev, compiled = make(dtype)
    opt_cpu = torch.optim.SGD(cpu.parameters(), lr=0.1)
    opt_dev = torch.optim.SGD(dev.parameters(), lr=0.1)
    before = packs()
    for step in range(3):
        x = torch.randn(32, 64, dtype=dtype)
        for model, opt, inp in ((cpu, opt_cpu, x), (compiled, opt_dev, x.to(DEV))):
            opt.zero_grad()
            model(inp).square().mean().backward()
            opt.step()
        with torch.no_grad():
            torch.testing.assert_close(dev.up.weight.cpu(), cpu.up.weight, **TOL[dtype])
    assert packs() == before
    check(cpu, compiled, dtype)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
