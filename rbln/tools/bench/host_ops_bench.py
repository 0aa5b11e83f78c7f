"""Cost of a host op inside a compiled artifact (SPEC J6).

A graph with `nonzero` between two device segments, compiled three ways:
  * host op (default): device program, nonzero by ATen on the CPU, device
    program for the rest (per nonzero count; the data is fixed here, so the
    count and its program are cached);
  * host_ops="none": the compile fails and the whole graph runs on the CPU
    (the compile_error fallback, SPEC I2/J6);
  * CPU eager, for reference.
Prints the first call (trace + compile) and the median warm call, then the
explain() report of one warm call of the host-op artifact.
"""

import argparse
import statistics
import time

import torch
import torch._dynamo


def nonzero_in_the_middle(x):
    y = torch.relu(x * 2 - 1)
    idx = torch.nonzero(y)
    rows = idx[:, 0].to(x.dtype)
    return y + 1, rows * 3 + 1


def timed(fn, x, iters):
    start = time.perf_counter()
    fn(x)
    torch.rbln.synchronize()
    first = time.perf_counter() - start
    for _ in range(3):
        fn(x)
    samples = []
    for _ in range(iters):
        start = time.perf_counter()
        fn(x)
        torch.rbln.synchronize()
        samples.append(time.perf_counter() - start)
    return first, statistics.median(samples)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--size", type=int, default=256)
    args = parser.parse_args()
    x_cpu = torch.randn(args.size, args.size, dtype=torch.float16)
    x = x_cpu.to("rbln")
    torch.rbln.bind_device_memory(x)
    print(f"torch {torch.__version__}, rbln profile {torch.rbln.get_device_profile()['name']}, "
          f"{torch.get_num_threads()} CPU thread(s)")
    print(f"nonzero_in_the_middle on {args.size}x{args.size} float16; "
          f"median of {args.iters} warm calls")
    print("  variant                               ms/call  first call ms")
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
        for name, options in (("rbln, nonzero as host op", {}),
                              ("rbln, host_ops=none (CPU fallback)", {"host_ops": "none"})):
            torch._dynamo.reset()
            f = torch.compile(nonzero_in_the_middle, backend="rbln", dynamic=False,
                              options=options)
            first, warm = timed(f, x, args.iters)
            print(f"  {name:36s} {warm * 1e3:8.3f}  {first * 1e3:10.1f}")
        first, warm = timed(nonzero_in_the_middle, x_cpu, args.iters)
        print(f"  {'cpu eager':36s} {warm * 1e3:8.3f}  -")
        torch._dynamo.reset()
        f = torch.compile(nonzero_in_the_middle, backend="rbln", dynamic=False)
        f(x)
        with torch.rbln.explain() as report:
            f(x)
        print(report.report())


if __name__ == "__main__":
    main()
