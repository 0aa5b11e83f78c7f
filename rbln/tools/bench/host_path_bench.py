"""Per-call cost of an op pinned to the CPU (fast host path, SPEC I5) against
the same kind of op through the generic boxed CPU fallback, and the CPU op
itself, measured in the same run.

torch.tril is pinned (tril.out); torch.triu is its mirror image with the same
CPU work and no rbln kernel, so it takes the boxed fallback. Both read their
input from the device and write a fresh device result.

    python rbln/tools/bench/host_path_bench.py [--iters N] [--threads T]
"""

import argparse

import torch

from op_overhead_bench import median_us


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iters", type=int, default=300)
    parser.add_argument("--threads", type=int, default=1,
                        help="intra-op threads (1: OpenMP spinning on a loaded "
                        "shared machine otherwise dominates small CPU kernels)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}; median of {args.iters} calls; {args.threads} intra-op thread(s)")
    print(f"{'shape':10s} {'cpu us':>8s} {'host path us':>13s} {'fallback us':>12s} {'fallback/host':>14s}")
    for shape in [(1, 64), (128, 128)]:
        a = torch.randn(*shape).half()
        x = a.to("rbln")
        for _ in range(5):
            torch.tril(x), torch.triu(x)
        before = torch.rbln.counters()
        host = median_us(lambda: torch.tril(x), args.iters)
        after = torch.rbln.counters()
        assert after["dispatch/host_path/aten::tril.out"] - before.get("dispatch/host_path/aten::tril.out", 0) == args.iters
        fallback = median_us(lambda: torch.triu(x), args.iters)
        cpu = median_us(lambda: torch.tril(a), args.iters)
        assert torch.equal(torch.tril(x).cpu(), torch.tril(a))
        assert torch.equal(torch.triu(x).cpu(), torch.triu(a))
        label = "x".join(map(str, shape))
        print(f"{label:10s} {cpu:8.1f} {host:13.1f} {fallback:12.1f} {fallback / host:14.2f}")


if __name__ == "__main__":
    main()
