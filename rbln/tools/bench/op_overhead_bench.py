"""Warm-path host overhead per eager op vs the same op on PyTorch CPU.

Every op is warmed up first (compiled, in the warm cache); then the median
per call over --iters calls is reported for rbln and for CPU, measured in the
same run, with the ratio. Run with TORCH_RBLN_DEPLOY=ON to leave out the
pre-dispatch NaN/Inf check (which reads inputs on the host by design).

    TORCH_RBLN_DEPLOY=ON python rbln/tools/bench/op_overhead_bench.py
"""

import argparse
import os
import statistics
import time

import torch


def median_us(fn, iters, per_call=1):
    """Median wall time of one call of fn, in microseconds; per_call > 1 when
    fn itself makes that many calls."""
    samples = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) / per_call)
    return statistics.median(samples) * 1e6


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iters", type=int, default=200)
    args = parser.parse_args(argv)
    deploy = os.environ.get("TORCH_RBLN_DEPLOY", "")
    print(f"torch {torch.__version__}; TORCH_RBLN_DEPLOY={deploy or '(unset)'}; "
          f"median of {args.iters} warm calls, 128x128 float16")
    a = torch.randn(128, 128).half()
    b = torch.randn(128, 128).half().abs() + 0.5
    x, y = a.to("rbln"), b.to("rbln")
    ops = {
        "add": lambda p, q: p + q,
        "mul": lambda p, q: p * q,
        "div": lambda p, q: p / q,
        "relu": lambda p, q: torch.relu(p),
        "gt": lambda p, q: p > q,
    }
    print(f"{'op':8s} {'cpu us':>8s} {'rbln us':>8s} {'rbln/cpu':>9s} {'compiled':>9s}")
    for name, fn in ops.items():
        for _ in range(3):
            fn(x, y)
            fn(a, b)
        before = torch.rbln.counters().get("dispatch/compiled_runs", 0)
        rbln = median_us(lambda: fn(x, y), args.iters)
        compiled = torch.rbln.counters().get("dispatch/compiled_runs", 0) - before == args.iters
        cpu = median_us(lambda: fn(a, b), args.iters)
        assert torch.equal(fn(x, y).cpu(), fn(a, b)), name
        print(f"{name:8s} {cpu:8.1f} {rbln:8.1f} {rbln / cpu:9.2f} {str(compiled):>9s}")
    # The same add on a 1x64 tensor: the kernel's work is negligible, so this
    # row is the warm path's host overhead alone.
    a1, b1 = a[:1, :64].clone(), b[:1, :64].clone()
    x1, y1 = a1.to("rbln"), b1.to("rbln")
    for _ in range(3):
        x1 + y1
    rbln = median_us(lambda: x1 + y1, args.iters)
    cpu = median_us(lambda: a1 + b1, args.iters)
    print(f"{'add 1x64':8s} {cpu:8.1f} {rbln:8.1f} {rbln / cpu:9.2f}")


if __name__ == "__main__":
    main()
