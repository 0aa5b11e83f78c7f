"""Optimizer step after a compiled forward/backward (issue 29 item 5): for
each torch.optim flavor, the ops of `opt.step()` that ran on the CPU
(dispatch/cpu_fallback, the acceptance: 0) and the step's median time on
rbln against the same optimizer on PyTorch's CPU, on GPT-2 (random init,
config in code, no hub).

    python3 rbln/tools/bench/optim_bench.py [--layers 2] [--hidden 128] [--steps 5]

Times taken while other processes run are not evidence (docs/benchmarks.md).
"""

import argparse
import statistics
import time

import torch
import transformers

import torch_rbln  # noqa: F401  (registers the rbln device)

F32, BF16 = torch.float32, torch.bfloat16

# (name, optimizer, arguments); no foreach/fused argument = torch.optim's
# default choice (foreach on rbln, the single-tensor loop on the CPU).
FLAVORS = [
    ("AdamW default", torch.optim.AdamW, {}),
    ("AdamW foreach", torch.optim.AdamW, {"foreach": True}),
    ("AdamW fused", torch.optim.AdamW, {"fused": True}),
    ("AdamW capturable", torch.optim.AdamW, {"foreach": True, "capturable": True}),
    ("AdamW foreach=False", torch.optim.AdamW, {"foreach": False}),
    ("Adam default", torch.optim.Adam, {}),
    ("SGD momentum", torch.optim.SGD, {"momentum": 0.9}),
    ("SGD fused", torch.optim.SGD, {"momentum": 0.9, "fused": True}),
]


def gpt2(layers, hidden, dtype, device):
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=layers, n_embd=hidden, n_head=max(1, hidden // 64),
                                     vocab_size=1024, n_positions=128, resid_pdrop=0.0,
                                     embd_pdrop=0.0, attn_pdrop=0.0)
    return transformers.GPT2LMHeadModel(config).to(dtype).to(device)


def fallbacks():
    return torch.rbln.counters().get("dispatch/cpu_fallback", 0)


def measure(device, cls, kwargs, layers, hidden, dtype, steps):
    """(CPU-fallback ops per step after the first, median step ms)."""
    model = gpt2(layers, hidden, dtype, device)
    lr = 1e-2 if cls is torch.optim.SGD else 1e-3
    if device == "cpu":
        kwargs = {k: v for k, v in kwargs.items() if k != "capturable"}
    opt = cls(model.parameters(), lr=lr, **kwargs)
    forward = torch.compile(model, backend="rbln") if device == "rbln" else model
    ids = torch.randint(0, 1024, (2, 64), generator=torch.Generator().manual_seed(1)).to(device)
    times, counts = [], []
    for i in range(steps + 2):  # SGD's first step makes its momentum buffers
        opt.zero_grad()
        forward(input_ids=ids, labels=ids).loss.backward()
        if device == "rbln":
            torch.rbln.synchronize()
        before = fallbacks()
        start = time.perf_counter()
        opt.step()
        if device == "rbln":
            torch.rbln.synchronize()
        if i >= 2:
            times.append((time.perf_counter() - start) * 1e3)
            counts.append(fallbacks() - before)
    return max(counts), statistics.median(times)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--only", default="", help="comma-separated flavor names")
    args = parser.parse_args(argv)
    transformers.logging.set_verbosity_error()
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    print(f"GPT-2 {args.layers} layers, hidden {args.hidden}; opt.step() after a compiled "
          f"forward/backward, median of {args.steps} steps")
    print(f"{'optimizer':22s} {'dtype':9s} {'cpu_fallback/step':>17s} {'rbln ms':>9s} "
          f"{'CPU ms':>8s} {'CPU/rbln':>8s}")
    for name, cls, kwargs in FLAVORS:
        if only and name not in only:
            continue
        for dtype in (F32, BF16):
            count, rbln_ms = measure("rbln", cls, kwargs, args.layers, args.hidden, dtype,
                                     args.steps)
            _, cpu_ms = measure("cpu", cls, kwargs, args.layers, args.hidden, dtype, args.steps)
            print(f"{name:22s} {str(dtype)[6:]:9s} {count:17d} {rbln_ms:9.2f} {cpu_ms:8.2f} "
                  f"{cpu_ms / rbln_ms:7.2f}x")


if __name__ == "__main__":
    main()
