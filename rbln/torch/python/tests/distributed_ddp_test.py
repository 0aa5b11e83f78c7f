"""DistributedDataParallel over rbln-ccl: two ranks, one simulated card each,
train the same parameters as one process on the concatenated batch."""
# spec: A8

import sys

import pytest
import torch
import torch.distributed as dist

import rbln_dist_util

STEPS = 3

# (dtype, width, global batch, tolerance): float32 at small widths runs the
# ops through the CPU fallback; float16 at width 64 runs compiled kernels
# (forward, backward, the optimizer and DDP's gradient division).
CASES = [
    (torch.float32, 16, 8, dict(rtol=1e-5, atol=1e-6)),
    (torch.float16, 64, 64, dict(rtol=1e-2, atol=2e-3)),
]


def _model(dtype, width):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, width // 2)
    )
    return model.to(dtype)


def _batches(dtype, width, batch):
    g = torch.Generator().manual_seed(7)
    return [
        (torch.randn(batch, width, generator=g).to(dtype),
         torch.randn(batch, width // 2, generator=g).to(dtype))
        for _ in range(STEPS)
    ]


def _train(model, batches, device):
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for x, y in batches:
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
        loss.backward()
        opt.step()
    return model


def _ddp_case(rank, world, dtype, width, batch, tol):
    from torch.nn.parallel import DistributedDataParallel as DDP

    import torch_rbln

    dev = torch.device("rbln")
    # Rank 1 starts from other weights: DDP must broadcast rank 0's.
    model = _model(dtype, width)
    if rank == 1:
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1.0)
    ddp = DDP(model.to(dev))
    per_rank = batch // world
    local = [(x[rank * per_rank : (rank + 1) * per_rank], y[rank * per_rank : (rank + 1) * per_rank])
             for x, y in _batches(dtype, width, batch)]
    before = torch_rbln._C._counters().get("ccl/collectives", 0)
    _train(ddp, local, dev)
    # The reducer's gradient all-reduces went through rbln-ccl.
    assert torch_rbln._C._counters()["ccl/collectives"] - before >= STEPS

    reference = _train(_model(dtype, width), _batches(dtype, width, batch), torch.device("cpu"))
    for (name, p), q in zip(ddp.module.named_parameters(), reference.parameters()):
        assert p.device.type == "rbln", name
        torch.testing.assert_close(p.detach().cpu(), q.detach(), **tol,
                                   msg=lambda m, name=name: f"rank {rank} {dtype} {name}: {m}")
    # Both ranks hold the same parameters bit for bit.
    flat = torch.cat([p.detach().reshape(-1) for p in ddp.module.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    assert torch.equal(gathered[0].cpu(), gathered[1].cpu()), f"ranks diverged ({dtype})"


def _ddp(rank, world, store_dir):
    for dtype, width, batch, tol in CASES:
        _ddp_case(rank, world, dtype, width, batch, tol)


def test_ddp_matches_single_process_training():
    # spec: A8
    rbln_dist_util.run_ranks(_ddp)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
