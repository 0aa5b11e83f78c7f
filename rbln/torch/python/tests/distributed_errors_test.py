"""rbln-ccl on bad input: clear errors for mismatched shapes across ranks
and tensors on the wrong device (rank failures: distributed_failure_test)."""
# spec: A8, B4

import sys

import pytest
import torch
import torch.distributed as dist

import rbln_dist_util


def _expect(exc_type, pattern, fn):
    with pytest.raises(exc_type, match=pattern):
        fn()


def _mismatches(rank, world, store_dir):
    dev = torch.device("rbln")
    # Shapes differ across ranks: every rank gets the same clear error...
    x = torch.ones(4 + rank, device=dev)
    _expect(ValueError, r"ranks disagree on all_reduce: rank 0: all_reduce\(float32\[4\], SUM\); "
            r"rank 1: all_reduce\(float32\[5\], SUM\)", lambda: dist.all_reduce(x))
    # ...dtypes and ops too...
    y = torch.ones(3, dtype=torch.float16 if rank == 0 else torch.bfloat16, device=dev)
    _expect(ValueError, r"float16\[3\].*bfloat16\[3\]", lambda: dist.broadcast(y, src=0))
    z = torch.ones(3, device=dev)
    op = dist.ReduceOp.SUM if rank == 0 else dist.ReduceOp.MAX
    _expect(ValueError, r"SUM.*MAX", lambda: dist.all_reduce(z, op=op))
    # ...a collective the other rank did not call...
    call = (lambda: dist.all_reduce(z)) if rank == 0 else (lambda: dist.broadcast(z, src=0))
    _expect(ValueError, r"rank 0: all_reduce.*rank 1: broadcast", call)
    # ...and the group stays usable afterwards.
    ok = torch.full((2,), float(rank), device=dev)
    dist.all_reduce(ok)
    assert ok.cpu().tolist() == [1.0, 1.0]

    # Point-to-point with the wrong receive buffer: the receiver says what
    # was sent; the pair stays usable.
    if rank == 0:
        dist.send(torch.arange(6, dtype=torch.float32, device=dev), dst=1)
        dist.send(torch.arange(3, dtype=torch.float32, device=dev), dst=1)
    else:
        wrong = torch.empty(5, device=dev)
        _expect(ValueError, r"recv on rank 1 expected float32\[5\] from rank 0 but rank 0 sent "
                r"float32\[6\]", lambda: dist.recv(wrong, src=0))
        right = torch.empty(3, device=dev)
        dist.recv(right, src=0)
        assert right.cpu().tolist() == [0.0, 1.0, 2.0]

    # Local mistakes fail before any communication (SPEC B4 for devices).
    _expect(ValueError, r"all_reduce got a tensor on meta.*rbln devices",
            lambda: dist.all_reduce(torch.ones(2, device="meta")))
    outs = [torch.empty(2, device=dev), torch.empty(2)]
    _expect(ValueError, r"all_gather got tensors on several devices \(cpu, rbln:0\)",
            lambda: dist.all_gather(outs, torch.ones(2, device=dev)))
    _expect(ValueError, r"AVG needs floating-point tensors, got torch.int32",
            lambda: dist.all_reduce(torch.ones(2, dtype=torch.int32, device=dev),
                                    op=dist.ReduceOp.AVG))
    out = torch.empty(3, device=dev)
    _expect(ValueError, r"all_gather_into_tensor needs an output of world_size \(2\)",
            lambda: dist.all_gather_single(out, torch.ones(2, device=dev)))
    dist.barrier()


def test_mismatches_and_wrong_devices_give_clear_errors():
    # spec: A8, B4
    rbln_dist_util.run_ranks(_mismatches)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
