"""vLLM on rbln at real width: a model with Llama-3.2-1B's widths and
vocabulary (hidden 2048, intermediate 8192, 32 query / 8 key-value heads of
64, vocab 128256, tied embeddings, llama3 RoPE scaling) but 2 layers, served
offline (`LLM(...).generate`) in float32: the greedy tokens of prompts
around and beyond a prefill chunk equal transformers' on the CPU, and no
step compiles or falls back after warm-up. The toy-width tests
(offline_generate_test.py) do not reach the real widths' GEMM blocking,
grouped-query attention over 8 heads or a 128256-wide lm_head.
Runs in the serving venv (serving_venv.py)."""
# spec: J1, J2

import os
import sys

from serving_venv import reexec_in_serving_venv

if __name__ == "__main__":
    reexec_in_serving_venv(__file__)

import pytest
import torch

from token_check import assert_same_tokens, cpu_greedy
from vllm_rbln.testing.local_model import write_model_dir

NEW_TOKENS = 8
# Short, over a block, over one prefill chunk (64 tokens a step), two.
PROMPT_LENGTHS = (5, 23, 70, 130)
# Llama-3.2-1B's configuration with 2 of its 16 layers.
WIDTHS = dict(
    hidden_size=2048, intermediate_size=8192, num_hidden_layers=2, num_attention_heads=32,
    num_key_value_heads=8, head_dim=64, rms_norm_eps=1e-5, tie_word_embeddings=True,
    rope_theta=500000.0, max_position_embeddings=131072, model_vocab_size=128256,
    rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
                     "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192})


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return write_model_dir(str(tmp_path_factory.mktemp("llama_real_width")), "llama",
                           init_std=0.05, **WIDTHS)


@pytest.fixture(scope="module")
def llm(model_dir):
    os.environ["TORCH_RBLN_DISABLE_FALLBACK"] = "all"
    import vllm

    llm = vllm.LLM(model_dir, dtype="float32", max_model_len=256, max_num_seqs=4,
                   max_num_batched_tokens=64, block_size=16, num_gpu_blocks_override=64,
                   enable_prefix_caching=True, seed=0)
    yield llm
    llm.llm_engine.engine_core.shutdown()


def test_real_width_tokens_match_cpu(llm, model_dir):
    import vllm

    generator = torch.Generator().manual_seed(3)
    prompts = [torch.randint(3, WIDTHS["model_vocab_size"], (n,), generator=generator).tolist()
               for n in PROMPT_LENGTHS]
    params = vllm.SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
    (before,) = llm.collective_rpc("rbln_stats")
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    got = [list(o.outputs[0].token_ids) for o in outs]
    want = cpu_greedy(model_dir, prompts, NEW_TOKENS)
    compared = 0
    for i, (tokens, (ref, decisive)) in enumerate(zip(got, want)):
        assert_same_tokens(tokens, ref, decisive, f"prompt {i} ({PROMPT_LENGTHS[i]} tokens)")
        compared += decisive
    assert compared >= 0.9 * NEW_TOKENS * len(prompts), (
        f"only {compared} tokens had a clear CPU margin; pick another seed")
    (stats,) = llm.collective_rpc("rbln_stats")
    assert stats["warm"] and stats["steps"] > before["steps"], stats
    assert all(v == 0 for v in stats["after_warm_up"].values()), stats
    # The weights' host copies were freed after warm-up (all of them: the
    # warm-up's calls read every weight), and serving did not need them.
    h, i, v = WIDTHS["hidden_size"], WIDTHS["intermediate_size"], WIDTHS["model_vocab_size"]
    q = WIDTHS["num_attention_heads"] * WIDTHS["head_dim"]
    kv = WIDTHS["num_key_value_heads"] * WIDTHS["head_dim"]
    layer = h * (q + 2 * kv) + q * h + 3 * h * i + 2 * h
    weights = 4 * (v * h + WIDTHS["num_hidden_layers"] * layer + h)  # float32, tied
    # and the buffers (RoPE's cos/sin table).
    assert weights <= stats["host_copies_freed_bytes"] <= 1.05 * weights, (stats, weights)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
