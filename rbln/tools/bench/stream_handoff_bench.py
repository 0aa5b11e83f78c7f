"""Should compiled kernels run asynchronously on the current stream?

Measures, in one run, what handing a kernel to the stream's worker thread
would cost against running it inline on the calling thread (what eager
compiled kernels do today, SPEC M2), with the same op on PyTorch CPU as the
reference:

  cpu add          128x128 float16 add on PyTorch CPU
  rbln add inline  the same add on rbln, warm (a warm-cache hit that runs
                   the program on the calling thread)
  hand-off, wait   one task through the current stream and back: an event
                   marker recorded on the stream's worker and waited for --
                   the least an asynchronous kernel costs whenever the host
                   needs its result next (printing, .item(), .cpu(), a CPU
                   fallback op, a NaN/Inf check)
  hand-off, queued the host side of submitting one task without waiting
                   (100 markers queued, then one synchronize; per marker)
  1024x1024 add    a kernel long enough for an asynchronous launch to hide

Run with TORCH_RBLN_DEPLOY=ON so the inline add carries no NaN/Inf check:

    TORCH_RBLN_DEPLOY=ON python rbln/tools/bench/stream_handoff_bench.py
"""

import argparse
import os

import torch

from op_overhead_bench import median_us


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iters", type=int, default=300)
    args = parser.parse_args(argv)
    deploy = os.environ.get("TORCH_RBLN_DEPLOY", "")
    print(f"torch {torch.__version__}; TORCH_RBLN_DEPLOY={deploy or '(unset)'}; "
          f"{torch.get_num_threads()} CPU thread(s); median of {args.iters}")
    a = torch.randn(128, 128).half()
    b = torch.randn(128, 128).half()
    x, y = a.to("rbln"), b.to("rbln")
    for _ in range(5):
        x + y
        a + b
    assert torch.equal((x + y).cpu(), a + b)
    before = torch.rbln.counters().get("dispatch/warm_hits", 0)
    inline = median_us(lambda: x + y, args.iters)
    hits = torch.rbln.counters().get("dispatch/warm_hits", 0) - before
    assert hits == args.iters, f"the add left the warm path ({hits} hits)"
    cpu = median_us(lambda: a + b, args.iters)

    # A large add: the kernel time an asynchronous launch could overlap
    # with host work.
    la, lb = torch.randn(1024, 1024).half(), torch.randn(1024, 1024).half()
    lx, ly = la.to("rbln"), lb.to("rbln")
    for _ in range(3):
        lx + ly
        la + lb
    large_inline = median_us(lambda: lx + ly, max(args.iters // 10, 5))
    large_cpu = median_us(lambda: la + lb, max(args.iters // 10, 5))

    stream = torch.rbln.current_stream()
    event = torch.rbln.Event()

    def round_trip():
        event.record(stream)
        event.synchronize()

    def queued(n=100):
        for _ in range(n):
            event.record(stream)
        stream.synchronize()

    for _ in range(10):
        round_trip()
    wait = median_us(round_trip, args.iters)
    submit = median_us(queued, max(args.iters // 10, 5), per_call=100)
    # The Python cost of the two calls alone (no stream work): an event
    # query on an idle stream.
    event.synchronize()
    python_only = median_us(lambda: (event.query(), event.query()), args.iters)

    print(f"{'':18s} {'us':>8s} {'/cpu add':>9s}")
    rows = [
        ("cpu add", cpu),
        ("rbln add inline", inline),
        ("hand-off, wait", wait),
        ("hand-off, queued", submit),
        ("2 python calls", python_only),
    ]
    for name, us in rows:
        print(f"{name:18s} {us:8.1f} {us / cpu:9.2f}")
    print(f"1024x1024 add: cpu {large_cpu:.1f} us, rbln inline {large_inline:.1f} us "
          f"({large_inline / large_cpu:.2f}x)")
    print(f"an asynchronous kernel whose result the host waits for would cost "
          f"{inline + wait - python_only:.1f} us vs {inline:.1f} us inline "
          f"({(inline + wait - python_only) / inline:.2f}x)")


if __name__ == "__main__":
    main()
