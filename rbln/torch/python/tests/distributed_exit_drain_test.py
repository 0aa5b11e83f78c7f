"""rbln-ccl's exit drain: process exit waits until gloo's worker threads have
let go of the tensors of finished collectives (a gloo thread
dropping them during interpreter finalization aborts the process)."""
# spec: A8

import sys
import tempfile

import pytest
import torch
import torch.distributed as dist

import torch_rbln  # noqa: F401  (registers rbln-ccl)
from torch_rbln.distributed import _exit_drain


def test_a_tensor_still_referenced_from_cpp_holds_exit_until_released(capsys):
    t = torch.ones(4)
    _exit_drain.track_tensors([t])
    view = t.view(2, 2)  # A C++ reference to t, as a gloo work holds one.
    assert not _exit_drain.wait_for_gloo_threads(timeout_s=0.05)
    assert "gloo still holds 1 tensors or jobs" in capsys.readouterr().err
    del view
    assert _exit_drain.wait_for_gloo_threads(timeout_s=0.05)


def test_references_from_before_tracking_do_not_hold_exit():
    t = torch.ones(4)
    view = t.view(2, 2)
    _exit_drain.track_tensors([t])
    assert _exit_drain.wait_for_gloo_threads(timeout_s=0.05)
    del view


def test_an_unfinished_job_holds_exit_until_it_ends():
    _exit_drain.begin_job()
    assert not _exit_drain.wait_for_gloo_threads(timeout_s=0.05)
    _exit_drain.end_job()
    assert _exit_drain.wait_for_gloo_threads(timeout_s=0.05)


def test_finished_collectives_leave_nothing_held():
    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group(backend="rbln-ccl", init_method=f"file://{tmp}/store", rank=0,
                                world_size=1)
        try:
            x = torch.arange(4.0, device="rbln")
            dist.all_reduce(x)
            dist.broadcast(x, src=0)
            dist.barrier()
            assert x.cpu().tolist() == [0.0, 1.0, 2.0, 3.0]
            assert _exit_drain.wait_for_gloo_threads(timeout_s=5)
            assert not _exit_drain._tensors and _exit_drain._jobs == 0
        finally:
            dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
