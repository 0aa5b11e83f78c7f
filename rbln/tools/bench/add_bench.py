"""Eager `add` on the simulated NPU vs PyTorch CPU, measured in the same run.

Steady state only (SPEC P10): every shape is warmed up first, so tracing,
IR building, passes and codegen are not timed; then both sides run the same
number of iterations and the median per call is reported, with the ratio
rbln / cpu (lower is better for rbln).

    python rbln/tools/bench/add_bench.py [--iters N] [--sizes 4096,128x128,1048576]

A size N is an (N/64, 64) tensor; RxC is that shape (128x128 is issue 17's add).
"""

import argparse
import statistics
import time

import torch


def time_per_call(fn, iters):
    samples = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--sizes", default="4096,128x128,262144,4194304")
    args = parser.parse_args(argv)
    shapes = [tuple(int(d) for d in s.split("x")) if "x" in s else (int(s) // 64, 64)
              for s in args.sizes.split(",")]
    print(f"torch {torch.__version__}, rbln profile {torch.rbln.get_device_profile()['name']}, "
          f"{torch.get_num_threads()} CPU thread(s), median of {args.iters} calls")
    print(f"{'dtype':9s} {'elements':>10s} {'cpu us':>10s} {'rbln us':>10s} {'rbln/cpu':>9s}")
    for dtype in (torch.float16, torch.bfloat16):
        for shape in shapes:
            n = shape[0] * shape[1]
            a = torch.randn(shape).to(dtype)
            b = torch.randn(shape).to(dtype)
            x, y = a.to("rbln"), b.to("rbln")
            for _ in range(3):  # Warm-up: compile and fill the warm cache.
                a + b
                x + y
            torch.rbln.synchronize()
            cpu = time_per_call(lambda: a + b, args.iters)
            rbln = time_per_call(lambda: x + y, args.iters)
            torch.rbln.synchronize()
            assert torch.equal((x + y).cpu(), a + b)
            print(f"{str(dtype)[6:]:9s} {n:10d} {cpu * 1e6:10.1f} {rbln * 1e6:10.1f} {rbln / cpu:9.2f}")


if __name__ == "__main__":
    main()
