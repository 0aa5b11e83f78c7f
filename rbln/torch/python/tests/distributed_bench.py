"""all_reduce time on 2 ranks: rbln-ccl on rbln tensors against gloo on CPU
tensors, with the agreement check on and off. Not a test; run by hand:

    python distributed_bench.py            (from a runfiles tree or with
                                            torch_rbln importable)
Prints a markdown table for docs/distributed.md.
"""

import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

import rbln_dist_util

SIZES = [1 << 10, 1 << 14, 1 << 18, 1 << 22]  # float32 elements: 4 KiB .. 16 MiB
ITERS = 10


def _time(fn, iters=ITERS):
    fn()
    fn()
    samples = []
    for _ in range(iters):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def _bench(rank, world, store_dir, out_path):
    cpu = dist.new_group(backend="gloo")
    rows = []
    for n in SIZES:
        x = torch.ones(n, device="rbln")
        c = torch.ones(n)
        t_rbln = _time(lambda: dist.all_reduce(x))
        t_gloo = _time(lambda: dist.all_reduce(c, group=cpu))
        rows.append((n * 4, t_rbln, t_gloo))
    if rank == 0:
        with open(out_path, "a") as f:
            check = os.environ.get("TORCH_RBLN_CCL_CHECK", "1")
            for nbytes, t_rbln, t_gloo in rows:
                f.write(f"| {nbytes >> 10} KiB | {check} | {t_rbln * 1e3:.2f} | {t_gloo * 1e3:.2f} |\n")


def main():
    out = os.path.abspath("distributed_bench.out")
    if os.path.exists(out):
        os.remove(out)
    for check in ("1", "0"):
        os.environ["TORCH_RBLN_CCL_CHECK"] = check
        rbln_dist_util.run_ranks(_bench, deadline_s=600, out_path=out)
    print("| size | check | rbln-ccl all_reduce ms | gloo CPU all_reduce ms |")
    print("|---|---|---|---|")
    with open(out) as f:
        sys.stdout.write(f.read())


if __name__ == "__main__":
    main()
