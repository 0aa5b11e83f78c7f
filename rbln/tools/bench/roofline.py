"""The machine's ceilings an LLM step is measured against, in the same run:
the vector units' arithmetic peak (//rbln/compiler/bench:compute_peak_bench),
PyTorch CPU's own bf16 GEMM rate at a prefill's shape, and the work a
prefill does (its multiply-adds counted from the model's config).

A prefill of L tokens is compute-bound: if the CPU baseline already runs at
a fraction f of the peak, no implementation of the same arithmetic can be
faster than it by more than 1 / f. llm_bench.py prints that bound beside
the measured ratio."""

import os
import re
import statistics
import subprocess
import sys
import time

import torch

# The units compute_peak_bench prints, best first for bf16 GEMMs: vdpbf16ps
# where the CPU has AVX-512 BF16, else the f32 FMAs a widened bf16 GEMM runs.
PEAK_UNITS = ("bf16_dot", "f32_fma512", "f32_fma256")


def binary_path(name, explicit=None):
    """//rbln/compiler/bench:<name>: `explicit`, Bazel runfiles, or the
    source tree's bazel-bin; None if not built."""
    if explicit:
        return explicit
    here = os.path.dirname(os.path.abspath(__file__))
    roots = [os.environ.get("RUNFILES_DIR"), os.environ.get("PYTHON_RUNFILES"),
             os.path.join(here, "..", "..", ".."),
             os.path.join(here, "..", "..", "..", "bazel-bin")]
    for root in filter(None, roots):
        for rel in (("torch_rbln", "rbln", "compiler", "bench", name),
                    ("rbln", "compiler", "bench", name)):
            path = os.path.join(root, *rel)
            if os.path.isfile(path) and os.access(path, os.X_OK):
                return path
    return None


def parse_peaks(text):
    """{unit: best GFLOP/s} of compute_peak_bench's output."""
    return {m.group(1): float(m.group(2))
            for m in re.finditer(r"^(\w+)\s+([\d.]+)\s+[\d.]+\s*$", text, re.M)
            if m.group(1) in PEAK_UNITS}


def compute_peak(explicit=None, iters=None):
    """(unit, best GFLOP/s on every core) of the first of PEAK_UNITS the CPU
    has, or None when compute_peak_bench is not built or failed."""
    path = binary_path("compute_peak_bench", explicit)
    if not path:
        return None
    cmd = [path] + (["--iters", str(iters)] if iters else [])
    try:
        text = subprocess.run(cmd, check=True, capture_output=True, text=True,
                              timeout=300).stdout
    except (OSError, subprocess.SubprocessError) as e:
        print(f"compute_peak_bench failed: {e}", file=sys.stderr)
        return None
    peaks = parse_peaks(text)
    unit = next((u for u in PEAK_UNITS if u in peaks), None)
    return (unit, peaks[unit]) if unit else None


def head_dim(config):
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def decoder_linear_params(config):
    """Weights of every decoder layer's linear layers (q, k, v, o, gate, up,
    down; biases left out: a few thousand multiply-adds)."""
    h, d = config.hidden_size, head_dim(config)
    q, kv = config.num_attention_heads * d, config.num_key_value_heads * d
    per_layer = h * q + 2 * h * kv + q * h + 3 * h * config.intermediate_size
    return config.num_hidden_layers * per_layer


def prefill_flops(config, length, kept_logits=1):
    """Flops (2 per multiply-add) of a batch-1 prefill of `length` tokens
    into an empty cache: the linear layers on every token, causal attention
    (each query against itself and the keys before it: scores and the
    weighted sum of values), and the LM head on `kept_logits` rows."""
    linear = 2 * length * decoder_linear_params(config)
    pairs = length * (length + 1) // 2
    attention = (config.num_hidden_layers * config.num_attention_heads * pairs
                 * 4 * head_dim(config))
    head = 2 * kept_logits * config.hidden_size * config.vocab_size
    return linear + attention + head


def torch_gemm_rate(rows, config, iters=7):
    """GFLOP/s of PyTorch CPU's bf16 GEMM at a prefill's up projection
    ([rows, hidden] x [hidden, intermediate]), median of `iters`: how fast
    the CPU baseline's own GEMM library runs on this machine."""
    a = torch.randn(rows, config.hidden_size, dtype=torch.bfloat16)
    w = torch.randn(config.intermediate_size, config.hidden_size, dtype=torch.bfloat16)
    with torch.inference_mode():
        for _ in range(2):
            torch.nn.functional.linear(a, w)
        times = []
        for _ in range(iters):
            start = time.perf_counter()
            torch.nn.functional.linear(a, w)
            times.append(time.perf_counter() - start)
    return 2 * rows * config.hidden_size * config.intermediate_size / statistics.median(times) / 1e9
