"""Model benchmark (issue 17 item 5): transformers models compiled on rbln
against PyTorch on the CPU, in the same run.

Models (configs in code, random weights, nothing downloaded):
  opt     OPTForCausalLM-style decoder: hidden 768, ffn 3072, 12 heads, seq 128
  llama   LlamaForCausalLM-style decoder: hidden 768, intermediate 3072, 12
          heads, seq 128 (rotary embeddings: sin/cos)
  resnet  ResNetForImageClassification at ResNet-18 shape (basic blocks
          [2, 2, 2, 2], widths 64..512), one 224x224 image (convolutions)
  moe     a Qwen3-MoE sparse MoE layer (Qwen3MoeSparseMoeBlock): hidden 1024,
          16 experts of intermediate 512, 4 routed per token, 128 tokens;
          transformers' grouped_mm experts (softmax top-k router, sort,
          histc, grouped GEMMs, weighted scatter back); also Inductor bf16,
          the dtype transformers' grouped GEMM compiles in
  zoo     every family of the model suite (rbln/tests/models/model_zoo.py:
          GPT-2, Llama, Qwen2, Mistral, Bloom, GPT-J, Falcon, BERT, T5, ViT,
          ResNet, ConvNeXt, Whisper) at the suite's small sizes, warm runs
          only (or one of them: zoo:gpt2)

Per model it reports
  - warm forward times: medians of --iters calls of each variant, timed
    round-robin (one call of each variant per round, so load on a shared
    machine hits all alike): rbln fp16 and bf16 (torch.compile(backend="rbln")),
    CPU eager fp32 and bf16, Inductor fp32; and the ratios cpu / rbln (>= 1:
    rbln is faster);
  - first calls with cold caches, each in a fresh process (no rbln disk
    cache, Inductor's caches in an empty directory): rbln fp16 and bf16,
    Inductor fp32, with rbln's per-phase breakdown (Dynamo capture,
    aot_autograd, FX->IR, compile -- frontend, MLIR passes, LLVM optimize and
    codegen -- constants upload, first run) and how the graph was cut into
    segments;
  - for the decoders, the first call with --layers and with twice as many
    layers (compile time should not double).
A model or variant that does not compile (or run) is reported with the
reason, not skipped silently.

    python3 rbln/tools/bench/model_bench.py [--models opt,llama,resnet,moe,zoo] [--iters 10]
    bazel run //rbln/tools/bench:model_bench -- [same flags]

Timing is host wall time after synchronize() (SPEC M5); warm-up first (P10).
Numbers from a loaded machine move 2-3x between runs (and the round-robin
only spreads the load, it does not remove it): on a shared machine they give
the direction only; measure on an idle one.
"""

import argparse
import copy
import json
import os
import statistics
import sys
import time

import torch

import compile_phases
from compile_phases import COMPILER_PHASES, PHASES  # noqa: F401 -- re-exported

# The model suite's zoo (rbln/tests/models), next to this file in the source
# tree and in Bazel's runfiles alike.
_ZOO_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir,
                        "tests", "models")

RBLN_VARIANTS = ("rbln fp16", "rbln bf16")
CPU_VARIANTS = ("cpu eager fp32", "cpu eager bf16", "inductor fp32")
# Under torch.compile transformers multiplies MoE experts with
# torch._grouped_mm only in bfloat16 (its opaque per-expert loop otherwise).
MOE_CPU_VARIANTS = CPU_VARIANTS + ("inductor bf16",)
VARIANTS = RBLN_VARIANTS + CPU_VARIANTS


def variants_of(name):
    """The variants `name` runs: rbln first, then the CPU's."""
    return RBLN_VARIANTS + cpu_variants_of(name)


def cpu_variants_of(name):
    return MOE_CPU_VARIANTS if name == "moe" else CPU_VARIANTS


FIRST_CALL_VARIANTS = ("rbln fp16", "rbln bf16", "inductor fp32")
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


# -- models ---------------------------------------------------------------------

def zoo():
    """model_zoo.SPECS: the model suite's families by name."""
    if _ZOO_DIR not in sys.path:
        sys.path.insert(0, _ZOO_DIR)
    import model_zoo

    return model_zoo.SPECS


def expand(models):
    """--models -> model names; "zoo" stands for every zoo:NAME."""
    out = []
    for name in (m.strip() for m in models.split(",")):
        if name == "zoo":
            out += [f"zoo:{n}" for n in zoo()]
        elif name:
            out.append(name)
    return out


def describe(name, layers, quick):
    if name.startswith("zoo:"):
        spec = zoo()[name[4:]]
        return f"{spec.name} (model suite size: {spec.pattern})"
    if name == "opt":
        return (f"OPT-style decoder (OPTForCausalLM), {layers} layers, "
                + ("hidden 64, ffn 256, seq 16" if quick else "hidden 768, ffn 3072, seq 128"))
    if name == "llama":
        return (f"Llama-style decoder (LlamaForCausalLM), {layers} layers, "
                + ("hidden 64, intermediate 256, seq 16" if quick
                   else "hidden 768, intermediate 3072, seq 128"))
    if name == "moe":
        return ("Qwen3-MoE sparse MoE layer (Qwen3MoeSparseMoeBlock, grouped_mm experts), "
                + ("hidden 64, 4 experts of 32, top 2, 16 tokens" if quick
                   else "hidden 1024, 16 experts of 512, top 4, 128 tokens"))
    return ("ResNet (ResNetForImageClassification), "
            + ("tiny, 1x3x32x32" if quick else "ResNet-18 shape, 1x3x224x224"))


def build(name, layers, quick):
    """(model in float32 on the CPU, example kwargs) with fixed random weights."""
    import transformers

    if name.startswith("zoo:"):
        specs = zoo()
        if name[4:] not in specs:
            raise ValueError(f"unknown zoo model {name!r}; choose from "
                             + ", ".join(f"zoo:{n}" for n in specs))
        spec = specs[name[4:]]
        return spec.make(), spec.example()
    torch.manual_seed(0)
    if name == "opt":
        hidden, ffn, heads, seq, vocab = (64, 256, 2, 16, 512) if quick else (768, 3072, 12, 128,
                                                                               50272)
        config = transformers.OPTConfig(
            hidden_size=hidden, ffn_dim=ffn, num_hidden_layers=layers, num_attention_heads=heads,
            vocab_size=vocab, max_position_embeddings=2048, word_embed_proj_dim=hidden,
            use_cache=False)
        model = transformers.OPTForCausalLM(config)
        inputs = {"input_ids": torch.randint(0, vocab, (1, seq))}
    elif name == "llama":
        hidden, inter, heads, seq, vocab = (64, 256, 2, 16, 512) if quick else (768, 3072, 12, 128,
                                                                                32000)
        config = transformers.LlamaConfig(
            hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
            num_attention_heads=heads, num_key_value_heads=heads, vocab_size=vocab,
            max_position_embeddings=2048, use_cache=False)
        model = transformers.LlamaForCausalLM(config)
        inputs = {"input_ids": torch.randint(0, vocab, (1, seq))}
    elif name == "moe":
        from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock

        hidden, inter, experts, top_k, tokens = (64, 32, 4, 2, 16) if quick else (1024, 512, 16, 4,
                                                                                 128)
        config = transformers.Qwen3MoeConfig(
            hidden_size=hidden, moe_intermediate_size=inter, num_experts=experts,
            num_experts_per_tok=top_k, norm_topk_prob=True)
        # What from_pretrained picks for a model (modeling_utils): the layer
        # alone has no implementation chosen.
        config._experts_implementation = "grouped_mm"
        model = Qwen3MoeSparseMoeBlock(config)
        with torch.no_grad():
            for p in model.parameters():
                p.normal_(0.0, 0.02)
        inputs = {"hidden_states": torch.randn(1, tokens, hidden)}
    elif name == "resnet":
        config = transformers.ResNetConfig(
            embedding_size=8 if quick else 64,
            hidden_sizes=[8, 16, 32, 64] if quick else [64, 128, 256, 512],
            depths=[1, 1, 1, 1] if quick else [2, 2, 2, 2], layer_type="basic",
            num_labels=10 if quick else 1000)
        model = transformers.ResNetForImageClassification(config)
        size = 32 if quick else 224
        inputs = {"pixel_values": torch.randn(1, 3, size, size)}
    else:
        raise ValueError(f"unknown model {name!r}; choose from opt, llama, resnet, moe")
    return model.eval(), inputs


def first_tensor(out):
    """The logits of a transformers output (or the tensor itself)."""
    if isinstance(out, torch.Tensor):
        return out
    logits = getattr(out, "logits", None)
    if logits is not None:
        return logits
    return out[0]


class Variant:
    """One way of running a model: device, dtype and compiler."""

    def __init__(self, label, model, inputs):
        self.label = label
        self.error = None
        self.note = ""
        kind, dtype = label.rsplit(" ", 1)
        self.dtype = DTYPES[dtype]
        self.on_rbln = kind == "rbln"
        model = model.to(self.dtype)
        inputs = {k: v.to(self.dtype) if v.is_floating_point() else v for k, v in inputs.items()}
        if self.on_rbln:
            model = model.to("rbln")
            inputs = {k: v.to("rbln") for k, v in inputs.items()}
            model = torch.compile(model, backend="rbln", dynamic=False)
        elif kind == "inductor":
            model = torch.compile(model, backend="inductor", dynamic=False)
        self.model = model
        self.inputs = inputs

    def __call__(self):
        with torch.inference_mode():
            out = first_tensor(self.model(**self.inputs))
            if self.on_rbln:
                torch.rbln.synchronize()
        return out


def rbln_failure(since=0):
    """Why an rbln compile after the first `since` failures ran on the CPU
    (the compile_error fallback), or None."""
    from torch_rbln import _dynamo as rbln_dynamo

    failures = rbln_dynamo.compile_failures()[since:]
    if not failures:
        return None
    graph, error = failures[-1]
    return f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"


def failure_count():
    from torch_rbln import _dynamo as rbln_dynamo

    return len(rbln_dynamo.compile_failures())


def host_op_note(since=0):
    """The host ops of the graphs compiled after the first `since`, if any
    (J6): the model compiles but runs those ops on the CPU."""
    notes = []
    for graph in torch.rbln.compiled_programs()[since:]:
        for op in graph.inspect().get("host_ops", []):
            notes.append(f"{op['op']} ({op['host_op_reason']})")
    return f"host ops: {', '.join(notes)}" if notes else ""


# -- first call in a fresh process ------------------------------------------------

def child_first_call(name, label, layers, quick):
    """Runs in the child: builds, compiles and calls once; prints JSON."""
    model, inputs = build(name, layers, quick)
    result = {"model": name, "variant": label, "layers": layers}
    try:
        variant = Variant(label, model, inputs)
        start = time.perf_counter()
        variant()
        result["first_call_ms"] = (time.perf_counter() - start) * 1e3
        if variant.on_rbln:
            failure = rbln_failure()
            if failure:
                raise RuntimeError(failure)
            result.update(compile_phases.collect(torch.rbln.compiled_programs()))
            result["note"] = host_op_note()
    except Exception as e:  # noqa: BLE001 -- reported, not raised
        result["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
    print("RESULT " + json.dumps(result), flush=True)


def first_call(name, label, layers, quick, timeout):
    """The first call of one variant in a fresh process with cold caches."""
    cmd = [sys.executable, os.path.abspath(__file__), "--child", name, label, str(layers)]
    if quick:
        cmd.append("--quick")
    return compile_phases.run_child(cmd, timeout)


# -- warm runs in this process ------------------------------------------------------

def warm(name, layers, quick, iters):
    """{variant: median ms or error}, and max |rbln - cpu fp32| per rbln variant."""
    model, inputs = build(name, layers, quick)
    with torch.inference_mode():
        reference = first_tensor(model(**inputs)).float()
    variants, results, errors = [], {}, {}
    torch._dynamo.reset()
    for label in variants_of(name):
        failures, graphs = failure_count(), len(torch.rbln.compiled_programs())
        try:
            v = Variant(label, copy.deepcopy(model), inputs)
            out = v()  # compile + warm-up
            if v.on_rbln:
                failure = rbln_failure(failures)
                if failure:
                    raise RuntimeError(f"does not compile: {failure}")
                v.note = host_op_note(graphs)
                diff = (out.cpu().float() - reference).abs().max().item()
                v.note = "; ".join(x for x in (f"max |diff| vs cpu fp32 {diff:.3g}", v.note) if x)
            v()
            variants.append(v)
        except Exception as e:  # noqa: BLE001 -- reported, not raised
            # The compile failure, if any, is the reason (not what its CPU
            # fallback ran into afterwards).
            failure = rbln_failure(failures) if label in RBLN_VARIANTS else None
            errors[label] = (f"does not compile: {failure}" if failure else
                             f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}")
    samples = {v.label: [] for v in variants}
    for _ in range(iters):
        for v in variants:
            start = time.perf_counter()
            v()
            samples[v.label].append((time.perf_counter() - start) * 1e3)
    for v in variants:
        results[v.label] = {"ms": statistics.median(samples[v.label]), "note": v.note}
    for label, error in errors.items():
        results[label] = {"error": error}
    return results


# -- report -----------------------------------------------------------------------

def print_model(name, layers, quick, warm_results, first, depth):
    print(f"\n== {describe(name, layers, quick)}")
    if warm_results is not None:
        print(f"  warm forward, median ms:")
        for label in variants_of(name):
            r = warm_results.get(label, {})
            if "ms" in r:
                print(f"    {label:16s} {r['ms']:10.2f}  {r.get('note', '')}")
            else:
                print(f"    {label:16s} {'-':>10s}  {r.get('error', 'not run')}")
        for rl in RBLN_VARIANTS:
            if "ms" not in warm_results.get(rl, {}):
                continue
            ratios = [f"{cl} {warm_results[cl]['ms'] / warm_results[rl]['ms']:.2f}x"
                      for cl in cpu_variants_of(name) if "ms" in warm_results.get(cl, {})]
            print(f"    ratio cpu/{rl} (>= 1: rbln faster): " + ", ".join(ratios))
    if first:
        print("  first call, cold caches, fresh process (ms):")
        for label, r in first.items():
            if "error" in r:
                print(f"    {label:16s} {'-':>10s}  {r['error']}")
                continue
            print(f"    {label:16s} {r['first_call_ms']:10.1f}  {r.get('note', '')}")
            for line in compile_phases.format_lines(r):
                print("      " + line)
        ind = first.get("inductor fp32", {}).get("first_call_ms")
        for rl in RBLN_VARIANTS:
            mine = first.get(rl, {}).get("first_call_ms")
            if ind and mine:
                print(f"    {rl} first call / inductor fp32 first call: {mine / ind:.2f}")
    if depth:
        for label, (a, b) in depth.items():
            if "error" in a or "error" in b:
                print(f"  depth {label}: {a.get('error') or b.get('error')}")
                continue
            ca, cb = a["phases"]["compile"], b["phases"]["compile"]
            print(f"  depth, {label}: {a['layers']} layers compile {ca:.1f} ms (first call "
                  f"{a['first_call_ms']:.1f}), {b['layers']} layers compile {cb:.1f} ms (first "
                  f"call {b['first_call_ms']:.1f}); compile ratio {cb / ca:.2f}, first-call "
                  f"ratio {b['first_call_ms'] / a['first_call_ms']:.2f}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="opt,llama,resnet,moe,zoo",
                        help="comma-separated: opt, llama, resnet, moe, zoo, zoo:NAME")
    parser.add_argument("--layers", type=int, default=4, help="decoder layers (depth check: 2x)")
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="tiny configs (smoke test)")
    parser.add_argument("--no-first-call", action="store_true")
    parser.add_argument("--no-warm", action="store_true")
    parser.add_argument("--timeout", type=int, default=1800, help="per first-call process, s")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--child", nargs=3, metavar=("MODEL", "VARIANT", "LAYERS"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        name, label, layers = args.child
        child_first_call(name, label, int(layers), args.quick)
        return 0
    import transformers

    load = os.getloadavg()[0]
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"{torch.get_num_threads()} CPU thread(s), rbln profile "
          f"{os.environ.get('RBLN_SIM_PROFILE', 'rebel100')}, load average {load:.1f} at start; "
          f"warm: median of {args.iters} round-robin rounds")
    results = {}
    for name in expand(args.models):
        is_zoo = name.startswith("zoo:")
        layers = args.layers if name in ("opt", "llama") else 0
        entry = {}
        entry["warm"] = None if args.no_warm else warm(name, layers, args.quick, args.iters)
        first, depth = {}, {}
        if not args.no_first_call and not is_zoo:
            for label in FIRST_CALL_VARIANTS:
                first[label] = first_call(name, label, layers, args.quick, args.timeout)
            if layers:
                for label in RBLN_VARIANTS:
                    deeper = first_call(name, label, 2 * layers, args.quick, args.timeout)
                    depth[label] = (first[label], deeper)
        entry["first_call"], entry["depth"] = first, depth
        results[name] = entry
        print_model(name, layers, args.quick, entry["warm"], first, depth)
        print(f"  (load average {os.getloadavg()[0]:.1f})")
        sys.stdout.flush()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
