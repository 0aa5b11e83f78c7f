"""LLM serving at real size (issue 29): prefill and static-cache greedy decode
of Llama-3.2-1B- and Qwen2.5-1.5B-shaped models in bfloat16, compiled on rbln,
against PyTorch CPU eager bf16 and Inductor bf16 in the same run.

Models (configs written here, random weights, nothing downloaded):
  llama   Llama-3.2-1B: 16 layers, hidden 2048, intermediate 8192, 32/8 heads,
          head_dim 64, vocab 128256, tied embeddings, rope_theta 500000 with
          llama3 scaling (factor 32, low 1, high 4, original 8192)
  qwen    Qwen2.5-1.5B: 28 layers, hidden 1536, intermediate 8960, 12/2 heads,
          vocab 151936, tied embeddings, q/k/v bias, rope_theta 1e6

Each variant runs one greedy step function -- the model's forward over
transformers' StaticCache (`logits_to_keep=1`) and the argmax of the last
logits, so the next token stays where the model runs -- compiled with
torch.compile(dynamic=False, fullgraph=True) for rbln and Inductor, as is for
CPU eager. Per model it reports:
  - prefill of 128 and 512 tokens (batch 1, empty cache): ms, tokens/s,
    GFLOP/s (the multiply-adds counted from the config) against the vector
    units' peak measured at the start of the run
    (//rbln/compiler/bench:compute_peak_bench) and PyTorch CPU's own bf16
    GEMM rate at the prefill's rows, and the most any implementation of that
    arithmetic can gain on CPU eager (eager's time over the peak's);
  - greedy decode at batch 1 and 8 after a 128-token prefill: ms per step,
    tokens/s, and the GB/s the step achieves (the bytes a step must read:
    the weights and the KV of the positions it attends to, on average over
    the timed steps -- not the whole static cache -- over the step's time)
    against the machine's read
    bandwidth measured at the start of the run (a read-only stream over all
    cores: //rbln/compiler/bench:stream_bench's `read` when built, else PyTorch's
    float32 sum over 512 MiB; the larger of the two);
  - the ratios rbln / CPU eager and rbln / Inductor (>= 1: rbln is faster);
  - recompiles during the timed decode loop (must be 0), and whether rbln's
    greedy tokens equal CPU eager bf16's (bf16 random models have near ties:
    a difference is not by itself an error);
  - device memory: peak allocated against weights + KV caches, and the host
    memory the GEMM library keeps packed weights in;
  - the first call of the compiled prefill and decode step, and of the plain
    compiled forward (no cache), each in a fresh process
    (cold caches), split by phase (Dynamo capture, aot_autograd, FX->IR, our
    compile, constants upload, first run), at --layers and at 1 layer.

    python3 rbln/tools/bench/llm_bench.py                 # both models, real size
    python3 rbln/tools/bench/llm_bench.py --models llama --layers 2   # minutes
    python3 rbln/tools/bench/llm_bench.py --regions ...   # decoder layers as
        nested compile regions (torch.rbln.mark_repeated_layers) on rbln

Timing is host wall time after torch.rbln.synchronize(); every shape is
warmed up first, variants timed round-robin. Measure on an idle machine.
"""

import argparse
import json
import os
import pathlib
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time

import torch

import compile_phases
import roofline
from roofline import head_dim

VARIANTS = ("rbln bf16", "cpu eager bf16", "inductor bf16")
SHORT = {"rbln": "rbln bf16", "eager": "cpu eager bf16", "inductor": "inductor bf16"}


# -- models ---------------------------------------------------------------------

def config_for(name, layers=None, tiny=False):
    """The transformers config of `name` (layers: override the depth; tiny:
    the same architecture at widths of tens, for smoke tests)."""
    import transformers

    if name == "llama":
        kw = dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                  num_attention_heads=32, num_key_value_heads=8, head_dim=64,
                  vocab_size=128256, max_position_embeddings=131072, rms_norm_eps=1e-5,
                  tie_word_embeddings=True,
                  rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0,
                                   "factor": 32.0, "low_freq_factor": 1.0,
                                   "high_freq_factor": 4.0,
                                   "original_max_position_embeddings": 8192})
        if tiny:
            kw.update(hidden_size=64, intermediate_size=256, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=16, vocab_size=1000)
        cls = transformers.LlamaConfig
    elif name == "qwen":
        kw = dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                  num_attention_heads=12, num_key_value_heads=2, vocab_size=151936,
                  max_position_embeddings=32768, rms_norm_eps=1e-6, tie_word_embeddings=True,
                  use_sliding_window=False,
                  rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
        if tiny:
            kw.update(hidden_size=64, intermediate_size=224, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=1000)
        cls = transformers.Qwen2Config
    else:
        raise ValueError(f"unknown model {name!r}; choose from llama, qwen")
    if layers:
        kw["num_hidden_layers"] = layers
    return cls(**kw)


def describe(name, config, tiny):
    base = {"llama": "Llama-3.2-1B", "qwen": "Qwen2.5-1.5B"}[name]
    c = config
    return (f"{base} architecture{' (tiny widths)' if tiny else ''}: {c.num_hidden_layers} layers, "
            f"hidden {c.hidden_size}, intermediate {c.intermediate_size}, "
            f"{c.num_attention_heads}/{c.num_key_value_heads} heads x {head_dim(c)}, "
            f"vocab {c.vocab_size}, tied embeddings, bf16")


def build(name, layers=None, tiny=False, seed=0):
    """(model in bf16 on the CPU, config): random weights drawn from one pool
    of N(0, 0.02) values at random offsets (a 1.5B-parameter model's own
    normal_ init takes half a minute), norm weights 1 as transformers sets."""
    import transformers

    config = config_for(name, layers, tiny)
    cls = (transformers.LlamaForCausalLM if name == "llama" else transformers.Qwen2ForCausalLM)
    from transformers.initialization import no_init_weights

    with no_init_weights():
        model = cls._from_config(config, dtype=torch.bfloat16)
    model.tie_weights()
    gen = torch.Generator().manual_seed(seed)
    pool = torch.randn(1 << 22, generator=gen).mul_(config.initializer_range).to(torch.bfloat16)
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if "norm" in pname:
                p.fill_(1.0)
                continue
            flat = p.view(-1)
            done = 0
            while done < flat.numel():
                start = int(torch.randint(0, pool.numel() // 2, (1,), generator=gen))
                n = min(flat.numel() - done, pool.numel() - start)
                flat[done:done + n].copy_(pool[start:start + n])
                done += n
    assert model.lm_head.weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    return model.eval(), config


def weight_bytes(model):
    """Bytes of the model's parameters, a tied weight counted once."""
    seen, total = set(), 0
    for p in model.parameters():
        if p.data_ptr() not in seen:
            seen.add(p.data_ptr())
            total += p.numel() * p.element_size()
    return total


def kv_bytes(config, batch, max_len):
    """Bytes of one static KV cache (keys and values of every layer, bf16)."""
    return (2 * config.num_hidden_layers * batch * config.num_key_value_heads * max_len
            * head_dim(config) * 2)


class Greedy(torch.nn.Module):
    """One greedy step: the forward over the static cache, then the argmax
    of the last position's logits ([batch, 1] token ids)."""

    def __init__(self, lm):
        super().__init__()
        self.lm = lm

    def forward(self, ids, cache):
        out = self.lm(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=1)
        return out.logits[:, -1].argmax(-1, keepdim=True)


def new_cache(config, batch, max_len, device):
    """A StaticCache allocated now (not lazily in the first compiled call,
    which would make that graph differ from every later one)."""
    import transformers

    cache = transformers.StaticCache(config=config, max_cache_len=max_len)
    cache.early_initialization(batch_size=batch, num_heads=config.num_key_value_heads,
                               head_dim=head_dim(config), dtype=torch.bfloat16,
                               device=torch.device(device))
    return cache


def reset_cache(cache):
    """Empties the cache for another prefill (the contents the attention
    masks out do not change the step's work)."""
    for layer in cache.layers:
        layer.cumulative_length.zero_()


def prompt(config, batch, length, seed=1):
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, config.vocab_size, (batch, length), generator=gen)


# -- variants -------------------------------------------------------------------

class Variant:
    def __init__(self, label, model, config, max_len, batches):
        self.label = label
        self.on_rbln = label.startswith("rbln")
        self.device = "rbln" if self.on_rbln else "cpu"
        step = Greedy(model)
        if self.on_rbln:
            self.fn = torch.compile(step, backend="rbln", dynamic=False, fullgraph=True)
        elif label.startswith("inductor"):
            self.fn = torch.compile(step, backend="inductor", dynamic=False, fullgraph=True)
        else:
            self.fn = step
        self.caches = {b: new_cache(config, b, max_len, self.device) for b in batches}
        self.error = None
        self.first_ms = {}  # what -> ms of the first (compiling) call

    def sync(self):
        if self.on_rbln:
            torch.rbln.synchronize()

    def call(self, ids, batch):
        with torch.inference_mode():
            out = self.fn(ids, self.caches[batch])
        self.sync()
        return out

    def timed(self, ids, batch):
        start = time.perf_counter()
        out = self.call(ids, batch)
        return (time.perf_counter() - start) * 1e3, out


def dynamo_frames():
    from torch._dynamo.utils import counters

    return counters["stats"].get("unique_graphs", 0)


def rbln_compiles():
    return torch.rbln.counters().get("graph/compiles", 0)


# -- read bandwidth ---------------------------------------------------------------

def read_bandwidth(stream_bench=None, mib=512):
    """{source: best GB/s} of read-only streams over all cores."""
    out = {}
    path = roofline.binary_path("stream_bench", stream_bench)
    if path:
        try:
            text = subprocess.run([path, "--floats", str(mib << 18), "--reps", "8"], check=True,
                                  capture_output=True, text=True, timeout=300).stdout
            m = re.search(r"^read\s+([\d.]+)", text, re.M)
            if m:
                out["stream_bench read"] = float(m.group(1))
        except (OSError, subprocess.SubprocessError) as e:
            print(f"stream_bench failed: {e}", file=sys.stderr)
    x = torch.ones(mib << 18, dtype=torch.float32)
    best = float("inf")
    x.sum()
    for _ in range(8):
        start = time.perf_counter()
        x.sum()
        best = min(best, time.perf_counter() - start)
    out[f"torch f32 sum ({torch.get_num_threads()} threads)"] = x.numel() * 4 / best / 1e9
    del x
    return out


def cpu_description():
    name, flags = platform.processor() or "unknown CPU", set()
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
        m = re.search(r"^model name\s*:\s*(.+)$", text, re.M)
        if m:
            name = m.group(1).strip()
        m = re.search(r"^flags\s*:\s*(.+)$", text, re.M)
        if m:
            flags = set(m.group(1).split())
    except OSError:
        pass
    isa = [f for f in ("avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "avx512_fp16")
           if f in flags]
    return f"{name} ({os.cpu_count()} CPUs; {', '.join(isa) or 'no AVX-512'})"


# -- warm runs --------------------------------------------------------------------

def run_model(name, args, bandwidth, peak=None):
    """Warm prefill and decode rows of every variant of one model."""
    model, config = build(name, args.layers, args.tiny)
    # Prefill runs at batch 1: its cache exists even when no decode does.
    batches = sorted(set(args.batch) | ({1} if args.prefill else set()))
    max_len = args.max_cache_len
    wbytes = weight_bytes(model)
    result = {"model": name, "description": describe(name, config, args.tiny),
              "weight_bytes": wbytes, "max_cache_len": max_len, "rows": {}, "notes": []}
    # Before any variant exists (nothing else allocating or running).
    gemm_rates = {length: roofline.torch_gemm_rate(length, config) for length in args.prefill}
    variants = []
    for label in args.variants:
        v = None
        try:
            if label == "rbln bf16":
                torch.rbln.reset_peak_memory_stats()
                base = torch.rbln.memory_allocated()
                v = Variant(label, _to_rbln(model, args.regions), config, max_len, batches)
                v.device_base = base
            else:
                v = Variant(label, model, config, max_len, batches)
            variants.append(v)
        except Exception as e:  # noqa: BLE001 -- reported, not raised
            result["notes"].append(f"{label}: {type(e).__name__}: {str(e)[:300]}")
    rows = result["rows"]

    def guarded(v, fn):
        if v.error is not None:
            return None
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 -- reported, not raised
            v.error = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
            return None

    # Prefill, batch 1: warm up (compiles), then round-robin.
    for length in args.prefill:
        ids = prompt(config, 1, length)
        key = f"prefill {length}"
        samples = {v.label: [] for v in variants}
        for v in variants:
            dev_ids = ids.to(v.device)

            def first(v=v, dev_ids=dev_ids):
                reset_cache(v.caches[1])
                ms, _ = v.timed(dev_ids, 1)
                v.first_ms[key] = ms
            guarded(v, first)
        for _ in range(args.iters):
            for v in variants:
                dev_ids = ids.to(v.device)

                def one(v=v, dev_ids=dev_ids):
                    reset_cache(v.caches[1])
                    v.sync()
                    samples[v.label].append(v.timed(dev_ids, 1)[0])
                guarded(v, one)
        rows[key] = {v.label: ({"ms": statistics.median(samples[v.label]),
                                "tokens_per_s": length * 1e3 / statistics.median(samples[v.label])}
                               if samples[v.label] else {"error": v.error}) for v in variants}
        rows[key]["_flops"] = roofline.prefill_flops(config, length)
        rows[key]["_torch_gemm_gflops"] = gemm_rates[length]

    # Decode at each batch after a DECODE_PREFILL-token prefill.
    for batch in sorted(set(args.batch)):
        key = f"decode b{batch}"
        ids = prompt(config, batch, args.decode_prefill, seed=2)
        # The timed step t (from 0) attends to decode_prefill + t + 1 positions.
        attended = args.decode_prefill + (args.decode_tokens + 1) / 2
        step_bytes = wbytes + kv_bytes(config, batch, attended)
        per_variant = {}
        state = {}
        for v in variants:
            def start(v=v):
                # Warm-up: a prefill and two steps (the first one compiles),
                # then a fresh prefill for the timed steps.
                cache = v.caches[batch]
                for _ in range(2):
                    reset_cache(cache)
                    tok = v.call(ids.to(v.device), batch)
                    t0 = time.perf_counter()
                    tok2 = v.call(tok, batch)
                    v.first_ms.setdefault(key, (time.perf_counter() - t0) * 1e3)
                    v.call(tok2, batch)
                reset_cache(cache)
                tok = v.call(ids.to(v.device), batch)
                state[v.label] = {"tok": tok, "tokens": [tok.cpu()], "ms": []}
            guarded(v, start)
        # Every variant is warm: nothing may compile from here on.
        frames, compiles = dynamo_frames(), rbln_compiles()
        if any(v.on_rbln for v in variants):
            torch.rbln.reset_peak_memory_stats()
        for _ in range(args.decode_tokens):
            for v in variants:
                if v.label not in state:
                    continue

                def step(v=v):
                    s = state[v.label]
                    ms, s["tok"] = v.timed(s["tok"], batch)
                    s["ms"].append(ms)
                    s["tokens"].append(s["tok"].cpu())
                guarded(v, step)
        for v in variants:
            s = state.get(v.label)
            if s is None or v.error is not None:
                per_variant[v.label] = {"error": v.error}
                continue
            ms = statistics.median(s["ms"])
            entry = {"ms": ms, "tokens_per_s": batch * 1e3 / ms,
                     "gb_per_s": step_bytes / ms / 1e6,
                     "tokens": torch.cat(s["tokens"], 1).tolist()}
            if v.on_rbln:
                entry["device_peak_bytes"] = torch.rbln.max_memory_allocated()
            per_variant[v.label] = entry
        rows[key] = per_variant
        rows[key]["_bytes"] = step_bytes
        rows[key]["_attended"] = attended
        rows[key]["_recompiles"] = {"dynamo graphs": dynamo_frames() - frames,
                                    "rbln graph compiles": rbln_compiles() - compiles}
    result["first_ms"] = {v.label: v.first_ms for v in variants}
    result["errors"] = {v.label: v.error for v in variants if v.error}
    rb = next((v for v in variants if v.on_rbln), None)
    if rb is not None:
        result["memory"] = {
            "device_peak_bytes": torch.rbln.max_memory_allocated(),
            "device_allocated_bytes": torch.rbln.memory_allocated() - rb.device_base,
            "kv_bytes": sum(kv_bytes(config, b, max_len) for b in batches),
            "packed_weight_host_bytes": torch.rbln.counters().get(
                "compiler/packed_weights/bytes", 0),
        }
    result["bandwidth"] = bandwidth
    result["peak"] = peak
    del variants, rb
    torch._dynamo.reset()
    if hasattr(torch, "rbln"):
        torch.rbln.empty_cache()
    return result


def _to_rbln(model, regions=False):
    """A copy of `model` on rbln (the CPU one stays for the CPU variants),
    its decoder layers marked as nested compile regions with `regions`."""
    import copy

    model = copy.deepcopy(model)
    if regions:
        torch.rbln.mark_repeated_layers(model)
    return model.to("rbln")


# -- first call in a fresh process --------------------------------------------------

def child_first_call(name, layers, tiny, max_len, length, regions, what):
    """In the child: with what="generate", the first prefill of `length`
    tokens and the first decode step of the rbln-compiled greedy step; with
    what="forward", the first call of the compiled forward (no cache) over
    `length` tokens; with rbln's phases."""
    model, config = build(name, layers, tiny)
    if regions:
        torch.rbln.mark_repeated_layers(model)
    model = model.to("rbln")
    ids = prompt(config, 1, length).to("rbln")
    out = {"model": name, "layers": config.num_hidden_layers}
    if what == "forward":
        fwd = torch.compile(model, backend="rbln", dynamic=False, fullgraph=True)
        steps = (("forward", lambda: fwd(ids, use_cache=False, logits_to_keep=1).logits),)
    else:
        step = torch.compile(Greedy(model), backend="rbln", dynamic=False, fullgraph=True)
        cache = new_cache(config, 1, max_len, "rbln")
        state = {}
        steps = (("prefill", lambda: state.setdefault("tok", step(ids, cache))),
                 ("decode", lambda: step(state["tok"], cache)))
    try:
        with torch.inference_mode():
            for key, run in steps:
                graphs = len(torch.rbln.compiled_programs())
                start = time.perf_counter()
                run()
                torch.rbln.synchronize()
                out[key] = {"first_call_ms": (time.perf_counter() - start) * 1e3}
                out[key].update(compile_phases.collect(torch.rbln.compiled_programs()[graphs:]))
    except Exception as e:  # noqa: BLE001 -- reported, not raised
        out["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
    print("RESULT " + json.dumps(out), flush=True)


def first_call(name, layers, args):
    """Fresh processes: the generate step's first calls, then the plain
    forward's (each pays the weights' upload)."""
    merged = {}
    for what in ("generate", "forward"):
        extra = (["--tiny"] if args.tiny else []) + (["--regions"] if args.regions else [])
        r = compile_phases.run_child(
            [sys.executable, os.path.abspath(__file__), "--child", name, str(layers), what,
             "--max-cache-len", str(args.max_cache_len),
             "--decode-prefill", str(args.decode_prefill)] + extra, args.timeout)
        if "error" in r and "error" not in merged:
            merged["error"] = f"{what}: {r['error']}"
        merged.update({k: v for k, v in r.items() if k != "error"})
    return merged


# -- report -----------------------------------------------------------------------

def ratio(a, b):
    return f"{a / b:5.2f}x" if a and b else "    -"


def compute_lines(row, labels, peak):
    """A prefill row's arithmetic: GFLOP/s per variant (and the share of
    the peak), PyTorch's own GEMM rate, and the most any implementation of
    the same arithmetic can gain on CPU eager."""
    gflop = row["_flops"] / 1e9
    rates = {l: gflop / (row[l]["ms"] / 1e3) for l in labels if "ms" in row.get(l, {})}
    share = (lambda g: f" ({100 * g / peak[1]:.0f}%)") if peak else (lambda g: "")
    lines = [f"{gflop:.1f} GFLOP a call: " + ", ".join(
        f"{l.split()[0] if l != SHORT['eager'] else 'eager'} {g:.0f} GFLOP/s{share(g)}"
        for l, g in rates.items())
        + f"; PyTorch CPU bf16 GEMM {row['_torch_gemm_gflops']:.0f} GFLOP/s"
        + share(row["_torch_gemm_gflops"])]
    eager = row.get(SHORT["eager"], {}).get("ms")
    if peak and eager:
        floor = gflop / peak[1] * 1e3
        lines.append(f"at the {peak[0]} peak ({peak[1]:.0f} GFLOP/s) a call takes >= "
                     f"{floor:.0f} ms: at most {eager / floor:.2f}x CPU eager")
    return lines


def print_model(r, args):
    print(f"\n== {r['description']}")
    print(f"  weights {r['weight_bytes'] / 1e9:.3f} GB; static cache {r['max_cache_len']} tokens")
    for note in r["notes"]:
        print(f"  not run: {note}")
    bw = max(r["bandwidth"].values())
    labels = [l for l in args.variants if l not in [n.split(":")[0] for n in r["notes"]]]
    head = "  {:<14}".format("step") + "".join(f"{l:>17}" for l in labels)
    print(head + "   rbln/eager rbln/inductor")
    for key, row in r["rows"].items():
        decode = key.startswith("decode")
        unit = "ms/step" if decode else "ms"
        cells, vals = [], {}
        for l in labels:
            e = row.get(l, {})
            if "ms" in e:
                vals[l] = e["ms"]
                cells.append(f"{e['ms']:9.1f} {unit:<7}")
            else:
                cells.append(f"{'error':>17}")
        rb, ea, ind = (vals.get(SHORT[k]) for k in ("rbln", "eager", "inductor"))
        print(f"  {key:<14}" + "".join(cells) + f"   {ratio(ea, rb):>10} {ratio(ind, rb):>13}")
        # tokens/s and, for decode, GB/s against the read bandwidth
        cells = []
        for l in labels:
            e = row.get(l, {})
            if "ms" not in e:
                cells.append(f"{'':>17}")
                continue
            cells.append(f"{e['tokens_per_s']:9.1f} tok/s")
        print(f"  {'':<14}" + "".join(f"{c:>17}" for c in cells))
        if decode:
            cells = []
            for l in labels:
                e = row.get(l, {})
                cells.append(f"{e['gb_per_s']:6.1f} GB/s {100 * e['gb_per_s'] / bw:3.0f}%"
                             if "ms" in e else "")
            print(f"  {'':<14}" + "".join(f"{c:>17}" for c in cells)
                  + f"   ({row['_bytes'] / 1e9:.3f} GB a step must read: weights + the KV of"
                  f" {row.get('_attended', 0):.0f} positions)")
            notes = ["compiles in the timed loop: " + ", ".join(
                f"{k} {v}" for k, v in row["_recompiles"].items())]
            ref = row.get(SHORT["eager"], {}).get("tokens")
            mine = row.get(SHORT["rbln"], {}).get("tokens")
            if ref and mine:
                same = sum(1 for a, b in zip(ref[0], mine[0]) if a == b)
                notes.append(f"rbln tokens = eager bf16 tokens: {same}/{len(ref[0])} (row 0)")
            print(f"  {'':<14}" + "; ".join(notes))
        elif "_flops" in row:
            for line in compute_lines(row, labels, r.get("peak")):
                print(f"  {'':<14}" + line)
    for l, err in r.get("errors", {}).items():
        print(f"  {l}: {err}")
    m = r.get("memory")
    if m:
        base = r["weight_bytes"] + m["kv_bytes"]
        print(f"  rbln device memory: peak allocated {m['device_peak_bytes'] / 1e9:.3f} GB = "
              f"{m['device_peak_bytes'] / base:.3f}x (weights + KV caches "
              f"{base / 1e9:.3f} GB); packed weights in host memory "
              f"{m['packed_weight_host_bytes'] / 1e9:.3f} GB")
    fm = r.get("first_ms", {})
    if fm:
        print("  first (compiling) call in this process, ms: " + "; ".join(
            f"{l}: " + ", ".join(f"{k} {v:.0f}" for k, v in d.items()) for l, d in fm.items()))
    for f in r.get("first_call", []):
        print(f"  first call, fresh process, rbln bf16, {f.get('layers')} layer(s):")
        if "error" in f:
            print(f"    {f['error']}")
            continue
        for what in ("prefill", "decode", "forward"):
            if what in f:
                print(f"    {what:8s} {f[what]['first_call_ms']:9.1f} ms")
                for line in compile_phases.format_lines(f[what]):
                    print("      " + line)
        total = sum(f[w]["first_call_ms"] for w in ("prefill", "decode") if w in f)
        print(f"    generate step (prefill + decode programs): {total:.1f} ms")
    firsts = r.get("first_call", [])
    if len(firsts) == 2 and all("prefill" in f for f in firsts):
        deep, shallow = firsts
        for what in ("prefill", "decode"):
            a, b = deep[what]["first_call_ms"], shallow[what]["first_call_ms"]
            print(f"  first call {what}: {deep['layers']} layers / 1 layer = {a / b:.2f}")
        a = sum(deep[w]["first_call_ms"] for w in ("prefill", "decode"))
        b = sum(shallow[w]["first_call_ms"] for w in ("prefill", "decode"))
        print(f"  first call generate step: {deep['layers']} layers / 1 layer = {a / b:.2f}")
        if "forward" in deep and "forward" in shallow:
            a, b = deep["forward"]["first_call_ms"], shallow["forward"]["first_call_ms"]
            print(f"  first call forward (no cache): {deep['layers']} layers / 1 layer = {a / b:.2f}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default="llama,qwen")
    p.add_argument("--layers", type=int, default=None, help="decoder layers (default: real)")
    p.add_argument("--tiny", action="store_true", help="tiny widths (smoke test)")
    p.add_argument("--variants", default="rbln,eager,inductor",
                   help="comma-separated: rbln, eager, inductor")
    p.add_argument("--prefill", default="128,512", help="prefill lengths (batch 1)")
    p.add_argument("--batch", default="1,8", help="decode batch sizes")
    p.add_argument("--decode-tokens", type=int, default=16, help="timed decode steps")
    p.add_argument("--decode-prefill", type=int, default=128,
                   help="prompt tokens before the decode steps (and the first-call prefill)")
    p.add_argument("--iters", type=int, default=3, help="timed prefill calls")
    p.add_argument("--max-cache-len", type=int, default=1024)
    p.add_argument("--no-first-call", action="store_true")
    p.add_argument("--stream-bench", default=None, help="path of //rbln/compiler/bench:stream_bench")
    p.add_argument("--compute-peak-bench", default=None,
                   help="path of //rbln/compiler/bench:compute_peak_bench")
    p.add_argument("--timeout", type=int, default=1800, help="per first-call process, s")
    p.add_argument("--json", help="also write the results here")
    p.add_argument("--regions", action="store_true",
                   help="mark the rbln model's decoder layers as nested compile regions "
                        "(torch.rbln.mark_repeated_layers): one layer captured, not all")
    p.add_argument("--child", nargs=3, metavar=("MODEL", "LAYERS", "WHAT"),
                   help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    # One greedy step function is compiled per shape (prefill lengths,
    # batches) and per backend: more than Dynamo's default limit of 8.
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
    if args.child:
        child_first_call(args.child[0], int(args.child[1]) or None, args.tiny, args.max_cache_len,
                         args.decode_prefill, args.regions, args.child[2])
        return 0
    args.variants = [SHORT[v.strip()] for v in args.variants.split(",") if v.strip()]
    args.prefill = [int(x) for x in args.prefill.split(",") if x]
    args.batch = [int(x) for x in args.batch.split(",") if x]
    if max(args.prefill + [args.decode_prefill]) + args.decode_tokens + 4 > args.max_cache_len:
        p.error("--max-cache-len must hold the longest prefill plus the decode steps")
    # Inductor's first compiles from an empty cache, in this run only.
    cache_dir = tempfile.mkdtemp(prefix="llm_bench_inductor_")
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", cache_dir)
    os.environ.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "0")
    os.environ.setdefault("TORCHINDUCTOR_AUTOGRAD_CACHE", "0")
    os.environ.setdefault("TORCH_RBLN_DISABLE_FALLBACK", "compile_error")
    import transformers

    transformers.logging.set_verbosity_error()
    print(f"{cpu_description()}; torch {torch.__version__}, transformers "
          f"{transformers.__version__}, {torch.get_num_threads()} CPU thread(s), rbln profile "
          f"{torch.rbln.get_device_profile()['name']}, load average {os.getloadavg()[0]:.1f} "
          f"at start")
    bandwidth = read_bandwidth(args.stream_bench)
    print("read bandwidth (best GB/s): " + ", ".join(f"{k} {v:.1f}" for k, v in bandwidth.items())
          + f"; the reference is the larger, {max(bandwidth.values()):.1f} GB/s")
    peak = roofline.compute_peak(args.compute_peak_bench)
    print("arithmetic peak (best GFLOP/s, every core): " + (
        f"{peak[0]} {peak[1]:.1f}" if peak else "not measured (compute_peak_bench not built)")
        + ("; AMX tiles not measured" if "amx_bf16" in cpu_description() else ""))
    print(f"prefill: batch 1, median of {args.iters}; decode: median of {args.decode_tokens} steps "
          f"after a {args.decode_prefill}-token prefill; static cache of {args.max_cache_len} tokens; "
          "ratios >= 1: rbln faster")
    results = []
    for name in [m.strip() for m in args.models.split(",") if m.strip()]:
        r = run_model(name, args, bandwidth, peak)
        if not args.no_first_call and SHORT["rbln"] in args.variants:
            layers = args.layers or config_for(name).num_hidden_layers
            r["first_call"] = [first_call(name, layers, args)]
            if layers > 1:
                r["first_call"].append(first_call(name, 1, args))
        print_model(r, args)
        print(f"  (load average {os.getloadavg()[0]:.1f})")
        sys.stdout.flush()
        results.append(r)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
