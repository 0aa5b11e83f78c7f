"""Device allocation throughput vs PyTorch's CPU allocator, in the same run.

Three rbln paths, each compared with `torch.empty` on the CPU:
  * lazy      torch.empty(device="rbln"): a virtual storage, no device memory
  * bound     torch.empty + bind_device_memory: the per-chiplet caching
              allocator serves a block (cache hits after warm-up)
The caching allocator's own C++ cost is measured by
//rbln/runtime:caching_allocator_bench.

    python rbln/tools/bench/alloc_bench.py [--iters N]
"""

import argparse
import statistics
import time

import torch


def per_call_us(fn, iters, repeats=5):
    best = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        best.append((time.perf_counter() - t0) / iters * 1e6)
    return statistics.median(best)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iters", type=int, default=2000)
    args = parser.parse_args(argv)
    print(f"torch {torch.__version__}; median of 5 x {args.iters} alloc+free pairs")
    print(f"{'bytes':>10s} {'cpu us':>8s} {'lazy us':>8s} {'bound us':>9s} {'lazy/cpu':>9s} {'bound/cpu':>10s}")
    for nbytes in (256, 64 << 10, 4 << 20):
        n = nbytes // 2

        def cpu():
            torch.empty(n, dtype=torch.float16)

        def lazy():
            torch.empty(n, dtype=torch.float16, device="rbln")

        def bound():
            torch.rbln.bind_device_memory(torch.empty(n, dtype=torch.float16, device="rbln"))

        for fn in (cpu, lazy, bound):  # Warm-up: caches and segments.
            fn()
        c, l, b = (per_call_us(f, args.iters) for f in (cpu, lazy, bound))
        print(f"{nbytes:10d} {c:8.2f} {l:8.2f} {b:9.2f} {l / c:9.2f} {b / c:10.2f}")


if __name__ == "__main__":
    main()
