"""Running a function on N ranks, one simulated card each, for the
distributed tests: torch.multiprocessing spawn, a FileStore rendezvous (no
port to race for) and a deadline after which every rank is killed, so a
broken collective fails the test instead of hanging it."""

import os
import tempfile
import time

import torch.multiprocessing as mp

# Per-process simulated machine: two rebel100 cards with small chiplets;
# rank r sees card r only (SPEC A8: one card per process).
SIM_ENV = {
    "RBLN_SIM_PROFILE": "rebel100",
    "RBLN_SIM_NPUS": "2",
    "RBLN_SIM_MEMORY_PER_CHIPLET": "256MiB",
    "GLOO_SOCKET_IFNAME": "lo",
}


def _entry(rank, fn, world_size, store_dir, args):
    os.environ["RBLN_VISIBLE_DEVICES"] = str(rank)
    import torch
    import torch.distributed as dist

    import torch_rbln  # noqa: F401  (registers rbln and rbln-ccl)

    assert torch.rbln.device_count() == 1, "each rank must see exactly one card"
    backend = args.pop("backend", "rbln-ccl")
    timeout = args.pop("timeout_s", 30)
    destroy = args.pop("destroy", True)
    import datetime

    dist.init_process_group(
        backend=backend,
        init_method=f"file://{store_dir}/store",
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=timeout),
    )
    try:
        fn(rank, world_size, store_dir=store_dir, **args)
    finally:
        if destroy:
            dist.destroy_process_group()


def run_ranks(fn, world_size=2, deadline_s=100, **args):
    """Runs fn(rank, world_size, store_dir=..., **args) on `world_size`
    spawned ranks after init_process_group(backend) over a FileStore in the
    temporary directory `store_dir` (fn may make more stores there).

    Raises the first rank's exception (mp.ProcessRaisedException) or
    TimeoutError after `deadline_s`. Returns the ranks' exit codes.
    """
    for key, value in SIM_ENV.items():
        os.environ.setdefault(key, value)
    with tempfile.TemporaryDirectory() as tmp:
        ctx = mp.start_processes(
            _entry,
            args=(fn, world_size, tmp, args),
            nprocs=world_size,
            join=False,
            start_method="spawn",
        )
        end = time.monotonic() + deadline_s
        try:
            while not ctx.join(timeout=max(0.1, end - time.monotonic())):
                if time.monotonic() >= end:
                    raise TimeoutError(f"ranks still running after {deadline_s} s")
        finally:
            for p in ctx.processes:
                if p.is_alive():
                    p.kill()
                    p.join()
        return [p.exitcode for p in ctx.processes]
