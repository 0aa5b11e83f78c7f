"""torch.compile(backend="rbln") timings (SPEC J3, P10).

1. J3's example, relu(x + y) on 128x128 float16: first call (trace +
   compile), rerun of the same program, a new shape (recompile).
2. The GPT-2-style block (torch_rbln.testing.gpt2_block) in float16: compiled
   on rbln vs PyTorch CPU eager vs torch.compile with inductor on the CPU, in
   the same run; every variant is warmed up first (P10), then the median of
   --iters calls is reported. The rbln block compiles into a fresh cache_dir
   and is compiled again after torch._dynamo.reset() (a disk hit). Note that
   inductor has an on-disk cache of its own (/tmp/torchinductor_<user>), so
   its first call is only a cold compile on the first run on a machine.
"""

import argparse
import statistics
import tempfile
import time

import torch
import torch._dynamo

import torch_rbln  # noqa: F401
from torch_rbln import _dynamo as rbln_dynamo
from torch_rbln.testing.gpt2_block import make_block


def ms(seconds):
    return f"{seconds * 1e3:9.3f}"


def timed(fn, *args, sync=None):
    start = time.perf_counter()
    out = fn(*args)
    if sync is not None:
        sync(out)
    return time.perf_counter() - start, out


def median_time(fn, args, iters, sync=None):
    times = [timed(fn, *args, sync=sync)[0] for _ in range(iters)]
    return statistics.median(times)


def device_sync(out):
    torch.rbln.synchronize()
    return out


def j3(iters):
    def compute(x, y):
        return torch.relu(x + y)

    torch._dynamo.reset()
    x = torch.randn(128, 128, dtype=torch.float16, device="rbln:0")
    y = torch.randn_like(x)
    sx = torch.randn(64, 128, dtype=torch.float16, device="rbln:0")
    sy = torch.randn_like(sx)
    f = torch.compile(compute, backend="rbln", dynamic=False)
    with torch.inference_mode():
        first, _ = timed(f, x, y, sync=device_sync)
        rerun = median_time(f, (x, y), iters, sync=device_sync)
        new_shape, _ = timed(f, sx, sy, sync=device_sync)
    print("J3 relu(x + y), float16 (card: ~800 ms / 0.2 ms / ~400 ms)")
    print(f"  first call (128x128, compile)   {ms(first)} ms")
    print(f"  rerun (median of {iters})          {ms(rerun)} ms")
    print(f"  new shape (64x128, recompile)   {ms(new_shape)} ms")


def transformer(iters, batch, seq, dim, heads, with_inductor):
    block = make_block(dim=dim, heads=heads, vocab=256, max_seq=seq)
    idx = torch.randint(0, 256, (batch, seq), generator=torch.Generator().manual_seed(0))
    rows = []
    with torch.no_grad():
        rows.append(("cpu eager", median_time(block, (idx,), iters), "-"))
        if with_inductor:
            torch._dynamo.reset()
            ind = torch.compile(block, backend="inductor", dynamic=False)
            warm, _ = timed(ind, idx)
            rows.append(("cpu inductor", median_time(ind, (idx,), iters), ms(warm).strip()))
        expected = block(idx)
        torch._dynamo.reset()
        dev_block = make_block(dim=dim, heads=heads, vocab=256, max_seq=seq).to("rbln:0")
        didx = idx.to("rbln:0")
        # A fresh cache_dir: the first compile writes it; after
        # torch._dynamo.reset() the same block loads from it (what a new
        # process pays, plus Dynamo's trace).
        with tempfile.TemporaryDirectory(prefix="rbln-bench-cache-") as cache_dir:
            compiled = torch.compile(dev_block, backend="rbln", dynamic=False,
                                     options={"cache_dir": cache_dir})
            try:
                warm, out = timed(compiled, didx, sync=device_sync)
                failures = rbln_dynamo.compile_failures()
            except RuntimeError as e:
                failures = rbln_dynamo.compile_failures() or [("?", e)]
            if failures:
                rows.append(("rbln compiled", None, f"n/a: {failures[0][1]}"))
            else:
                err = (out.cpu().float() - expected.float()).abs().max().item()
                rows.append(("rbln compiled",
                             median_time(compiled, (didx,), iters, sync=device_sync),
                             f"{ms(warm).strip()}  (max |rbln - cpu eager| = {err:.2e})"))
                torch._dynamo.reset()
                again = torch.compile(dev_block, backend="rbln", dynamic=False,
                                      options={"cache_dir": cache_dir})
                c0 = torch.rbln.counters()
                reload, _ = timed(again, didx, sync=device_sync)
                c1 = torch.rbln.counters()
                hits = c1.get("compiler/disk_hits", 0) - c0.get("compiler/disk_hits", 0)
                codegen = c1.get("compiler/compiles", 0) - c0.get("compiler/compiles", 0)
                rows.append(("  after reset", None,
                             f"{ms(reload).strip()}  (cache_dir: {hits} disk hit(s), "
                             f"{codegen} codegen)"))
    print(f"GPT-2-style block, float16, batch {batch}, seq {seq}, dim {dim}, heads {heads}; "
          f"median of {iters} calls after warm-up")
    print(f"  {'variant':<14} {'ms/call':>10}  first call ms (compile)")
    for name, t, note in rows:
        print(f"  {name:<14} {ms(t) if t is not None else '       n/a':>10}  {note}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--no-inductor", action="store_true")
    args = p.parse_args()
    print(f"torch {torch.__version__}, rbln profile {torch.rbln.get_device_profile()['name']}, "
          f"{torch.get_num_threads()} CPU thread(s)")
    j3(args.iters)
    transformer(args.iters, args.batch, args.seq, args.dim, args.heads, not args.no_inductor)


if __name__ == "__main__":
    main()
