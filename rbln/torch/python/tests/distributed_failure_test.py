"""rbln-ccl when a rank dies or stalls mid-collective: the other rank gets
a clear error, and no hang past the group's timeout."""
# spec: A8

import os
import sys
import time

import pytest
import torch
import torch.distributed as dist

import rbln_dist_util


TIMEOUT_S = 5


def _rank_fails(rank, world, store_dir, stall):
    dev = torch.device("rbln")
    x = torch.ones(1 << 16, device=dev)
    dist.all_reduce(x)  # Both ranks are up.
    if rank == 1:
        # Rank 0 is inside the next collective by then. A dying rank leaves
        # after 1 s; a stalled one outlives rank 0's timeout.
        time.sleep(TIMEOUT_S + 8 if stall else 1.0)
        os._exit(0)  # Leaves without a word (exit code 0 keeps spawn quiet).
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"rbln-ccl: all_reduce failed on rank 0 of 2"):
        dist.all_reduce(x)
    took = time.monotonic() - start
    # A dead peer is noticed when its connections close, before the
    # timeout; a stalled one at the group's timeout.
    if stall:
        assert TIMEOUT_S - 0.5 < took < TIMEOUT_S + 5, f"the stall took {took:.1f} s to surface"
    else:
        assert took < TIMEOUT_S - 1, f"the death took {took:.1f} s to surface"
    os._exit(0)  # The group is broken; skip its teardown.


@pytest.mark.parametrize("stall", [False, True], ids=["dies", "stalls"])
def test_rank_failure_mid_collective_raises_within_timeout(stall):
    # spec: A8
    rbln_dist_util.run_ranks(_rank_fails, timeout_s=TIMEOUT_S, destroy=False, deadline_s=90,
                             stall=stall)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
