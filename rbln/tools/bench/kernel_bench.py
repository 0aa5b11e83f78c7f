"""Compiled-kernel speed against PyTorch on the CPU, in one run (issue 17).

1. The machine's memory bandwidth: //rbln/compiler/bench:stream_bench (STREAM
   copy/scale/add/triad on every core), run as a subprocess.
2. matmul 1024x1024x1024 compiled with torch.compile(backend="rbln") in
   bfloat16 and float16 (GEMMs through oneDNN, see docs/benchmarks.md),
   against PyTorch CPU eager float32/bfloat16 and Inductor float32, with
   GFLOP/s and the ratios of the acceptance rows (bf16 >= 0.8x eager bf16,
   fp16 >= 1.0x eager fp32).
3. The fused element-wise chain relu((x*g+b)*0.5) on 4M float16 elements
   compiled on rbln, against PyTorch CPU eager and Inductor float32, with
   GB/s (3 inputs + 1 output) and the share of the STREAM triad bandwidth
   (acceptance: >= 60%).

4. Attention, bf16 sdpa over [1, 12, L, 64] compiled on rbln, against
   PyTorch CPU eager and Inductor: dense (no mask: the composition's GEMMs;
   an all-zero mask: the masked attention kernel, which visits every key)
   and a static KV cache's prefill (L queries over 1024 slots, keys past
   each query's position masked: the kernel skips them).

Every variant is warmed up first; times are medians of --iters calls (rbln
calls end with torch.rbln.synchronize()). Measure on an idle machine: no
builds or other benchmarks at the same time.

    bazel run -c opt //rbln/tools/bench:kernel_bench -- [--iters N]
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import time

import torch
import torch._dynamo

import torch_rbln  # noqa: F401

import roofline


def median_s(fn, args, iters, sync=None):
    out = fn(*args)  # warm-up (compiles)
    if sync is not None:
        sync()
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        fn(*args)
        if sync is not None:
            sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def stream(path, floats):
    """Best GB/s per STREAM kernel."""
    text = subprocess.run([path, "--floats", str(floats)], check=True,
                          capture_output=True, text=True).stdout
    print(text.rstrip())
    return {m.group(1): float(m.group(2))
            for m in re.finditer(r"^(copy|scale|add|triad)\s+([\d.]+)", text, re.M)}


def rbln_sync():
    torch.rbln.synchronize()


def matmul(n, iters):
    flops = 2.0 * n ** 3

    def mm(a, b):
        return a @ b

    gen = torch.Generator().manual_seed(0)
    a32 = torch.randn(n, n, generator=gen)
    b32 = torch.randn(n, n, generator=gen)
    rows = {}
    with torch.no_grad():
        for dtype in (torch.float32, torch.bfloat16):
            a, b = a32.to(dtype), b32.to(dtype)
            rows[f"cpu eager {dtype}"] = median_s(mm, (a, b), iters)[0]
        torch._dynamo.reset()
        ind = torch.compile(mm, backend="inductor", dynamic=False)
        rows["cpu inductor torch.float32"] = median_s(ind, (a32, b32), iters)[0]
        for dtype in (torch.bfloat16, torch.float16):
            torch._dynamo.reset()
            f = torch.compile(mm, backend="rbln", dynamic=False)
            a, b = a32.to(dtype).to("rbln"), b32.to(dtype).to("rbln")
            t, out = median_s(f, (a, b), iters, sync=rbln_sync)
            # Against f32 products of the same operands; PyTorch's own
            # half-precision matmul for scale (both round the output once).
            ref = a32.to(dtype).float() @ b32.to(dtype).float()
            cpu_half = (a32.to(dtype) @ b32.to(dtype)).float()
            rows[f"rbln compiled {dtype}"] = t
            rows[f"rbln compiled {dtype} err"] = (
                (out.cpu().float() - ref).abs().max().item(),
                (cpu_half - ref).abs().max().item())
    print(f"\nmatmul {n}x{n}x{n}; median of {iters} calls after warm-up")
    print(f"  {'variant':<30} {'ms':>9} {'GFLOP/s':>9}")
    for name, t in rows.items():
        if name.endswith(" err"):
            continue
        print(f"  {name:<30} {t * 1e3:9.2f} {flops / t / 1e9:9.1f}")
    bf16 = rows["cpu eager torch.bfloat16"] / rows["rbln compiled torch.bfloat16"]
    fp16 = rows["cpu eager torch.float32"] / rows["rbln compiled torch.float16"]
    fp16_ind = rows["cpu inductor torch.float32"] / rows["rbln compiled torch.float16"]
    bf16_ind = rows["cpu inductor torch.float32"] / rows["rbln compiled torch.bfloat16"]
    print(f"  ratio rbln bf16 vs cpu eager bf16: {bf16:5.2f}x  (target >= 0.8)")
    print(f"  ratio rbln fp16 vs cpu eager fp32: {fp16:5.2f}x  (target >= 1.0)")
    print(f"  ratio rbln fp16 vs inductor fp32:  {fp16_ind:5.2f}x")
    print(f"  ratio rbln bf16 vs inductor fp32:  {bf16_ind:5.2f}x")
    for dtype in ("bfloat16", "float16"):
        rbln_err, cpu_err = rows[f"rbln compiled torch.{dtype} err"]
        print(f"  max |x - f32 product of the same {dtype} operands|: rbln {rbln_err:.3g}, "
              f"cpu eager {dtype} {cpu_err:.3g}")


def fused_chain(elements, iters, stream_gbs):
    def chain(x, g, b):
        return torch.relu((x * g + b) * 0.5)

    gen = torch.Generator().manual_seed(1)
    x, g, b = (torch.randn(elements, generator=gen) for _ in range(3))
    rows = []
    with torch.no_grad():
        t = median_s(chain, (x, g, b), iters)[0]
        rows.append(("cpu eager torch.float32", t, 16 * elements))
        torch._dynamo.reset()
        ind = torch.compile(chain, backend="inductor", dynamic=False)
        rows.append(("cpu inductor torch.float32",
                     median_s(ind, (x, g, b), iters)[0], 16 * elements))
        torch._dynamo.reset()
        f = torch.compile(chain, backend="rbln", dynamic=False)
        args = [v.half().to("rbln") for v in (x, g, b)]
        t, out = median_s(f, args, iters, sync=rbln_sync)
        # PyTorch's CPU float16 eager: each op rounded to float16.
        exact = torch.equal(out.cpu(), chain(*(v.half() for v in (x, g, b))))
        rows.append(("rbln compiled torch.float16", t, 8 * elements))
    print(f"\nfused relu((x*g+b)*0.5), {elements} elements; median of {iters} calls")
    print(f"  {'variant':<30} {'ms':>9} {'GB/s':>8} {'of triad':>9}")
    for name, t, nbytes in rows:
        gbs = nbytes / t / 1e9
        share = f"{100 * gbs / stream_gbs:8.0f}%" if stream_gbs else "       -"
        print(f"  {name:<30} {t * 1e3:9.3f} {gbs:8.1f} {share}")
    rbln_t = rows[2][1]
    print(f"  ratio rbln fp16 vs inductor fp32: {rows[1][1] / rbln_t:5.2f}x, "
          f"vs eager fp32: {rows[0][1] / rbln_t:5.2f}x")
    print(f"  rbln result bit-identical to PyTorch CPU float16 eager: {exact}")


def attention(lengths, iters, slots=1024):
    def sdpa(q, k, v, mask=None):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    print(f"\nattention, bf16 sdpa over [1, 12, L, 64]; median of {iters} calls")
    print(f"  {'case':<40} {'rbln ms':>9} {'eager ms':>9} {'inductor ms':>12} {'/eager':>7} "
          f"{'/inductor':>9}")
    gen = torch.Generator().manual_seed(2)
    for length in lengths:
        q = torch.randn(1, 12, length, 64, generator=gen).to(torch.bfloat16)
        dense = torch.randn(2, 1, 12, length, 64, generator=gen).to(torch.bfloat16)
        cache = torch.randn(2, 1, 12, slots, 64, generator=gen).to(torch.bfloat16)
        filled = torch.arange(slots).view(1, slots) <= torch.arange(length).view(length, 1)
        static = torch.where(filled, 0.0, float("-inf")).to(torch.bfloat16).view(1, 1, length, slots)
        zero = torch.zeros(1, 1, length, length, dtype=torch.bfloat16)
        cases = [(f"dense L={length}, no mask (GEMMs)", (q, dense[0], dense[1]), None),
                 (f"dense L={length}, zero mask (kernel)", (q, dense[0], dense[1]), zero),
                 (f"static cache L={length}, S={slots} (kernel)", (q, cache[0], cache[1]), static)]
        for name, (a, b, c), mask in cases:
            extra = () if mask is None else (mask,)
            with torch.inference_mode():
                eager = median_s(sdpa, (a, b, c) + extra, iters)[0]
                torch._dynamo.reset()
                ind = median_s(torch.compile(sdpa, backend="inductor", dynamic=False),
                               (a, b, c) + extra, iters)[0]
                torch._dynamo.reset()
                on_rbln = tuple(x.to("rbln") for x in (a, b, c) + extra)
                rb = median_s(torch.compile(sdpa, backend="rbln", dynamic=False), on_rbln, iters,
                              sync=rbln_sync)[0]
            print(f"  {name:<40} {rb * 1e3:9.2f} {eager * 1e3:9.2f} {ind * 1e3:12.2f} "
                  f"{eager / rb:6.2f}x {ind / rb:8.2f}x")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--n", type=int, default=1024, help="matmul size")
    p.add_argument("--elements", type=int, default=4 << 20)
    p.add_argument("--stream-floats", type=int, default=32 << 20)
    p.add_argument("--attention-lengths", type=lambda v: [int(x) for x in v.split(",") if x],
                   default=[128, 512], help="query lengths of the attention rows")
    p.add_argument("--stream-bench", default=None,
                   help="path of //rbln/compiler/bench:stream_bench (default: runfiles)")
    args = p.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU thread(s), "
          f"rbln profile {torch.rbln.get_device_profile()['name']}, "
          f"load average {os.getloadavg()[0]:.1f}")
    path = roofline.binary_path("stream_bench", args.stream_bench)
    triad = None
    if path is None:
        print("stream_bench not found (bazel run //rbln/tools/bench:kernel_bench, or --stream-bench)",
              file=sys.stderr)
    else:
        triad = stream(path, args.stream_floats).get("triad")
    matmul(args.n, args.iters)
    fused_chain(args.elements, args.iters, triad)
    attention(args.attention_lengths, args.iters)


if __name__ == "__main__":
    main()
