"""Model families served by vLLM on rbln: the architecture in
RBLN_TEST_ARCH (vllm_rbln.testing.local_model.ARCHITECTURES; one per Bazel
target, one vLLM engine per process) generates CPU transformers' greedy
tokens for a batch of prompts of different lengths, continuously batched
with chunked prefill, with every op of the step inside the compiled program
(no CPU fallback: TORCH_RBLN_DISABLE_FALLBACK=all), and the steps never
compile after warm-up. Dense: Qwen3 (q/k norms), Mistral (sliding window),
Phi-3 (fused projections), Gemma 3 (local and global layers), Gemma 2
(soft-capped attention scores); mixture of experts (vllm_rbln/moe.py:
experts, routing and the shared expert inside the step, no
`vllm.moe_forward` custom op): Qwen3-MoE, Qwen2-MoE, GLM-4.5 (grouped top-k
routing), ERNIE-4.5 (top-k with a correction bias), Mixtral, gpt-oss
(attention sinks, local/global layers, biased experts with a clamped
SwiGLU), and gpt-oss with MXFP4 experts (its checkpoints' format).
The model is written in this process first (parallel CPU ops: OpenMP
threads up) before vLLM starts its engine process, which vllm-rbln spawns.
Runs in the serving venv (serving_venv.py)."""
# spec: J1, J2, I6

import os
import sys

from serving_venv import reexec_in_serving_venv

if __name__ == "__main__":
    reexec_in_serving_venv(__file__)

import pytest

from token_check import assert_batch_matches_cpu, cpu_greedy, random_prompts
from vllm_rbln.testing.local_model import write_model_dir

# An architecture, or `gpt_oss_mxfp4`: gpt-oss with its experts in MXFP4, as
# its checkpoints are (vllm_rbln/mxfp4.py; the CPU reference dequantizes
# them with transformers' own code).
ARCH = os.environ.get("RBLN_TEST_ARCH", "qwen3_moe")
QUANTIZATION = "mxfp4" if ARCH.endswith("_mxfp4") else None
NEW_TOKENS = 12
PROMPT_LENGTHS = (3, 9, 17, 31, 64, 65)


def _vllm():
    os.environ["TORCH_RBLN_DISABLE_FALLBACK"] = "all"
    os.environ["VLLM_RBLN_EXPLAIN"] = "1"
    import vllm

    return vllm


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    # Initializing the weights runs parallel CPU ops here (OpenMP threads
    # up) before vLLM starts its engine process: a forked engine would wait
    # forever on the dead thread pool; vllm-rbln spawns it.
    return write_model_dir(str(tmp_path_factory.mktemp(ARCH)), ARCH.removesuffix("_mxfp4"),
                           quantization=QUANTIZATION)


@pytest.fixture(scope="module")
def llm(model_dir):
    vllm = _vllm()
    llm = vllm.LLM(model_dir, dtype="float32", max_model_len=256, max_num_seqs=4,
                   max_num_batched_tokens=64, block_size=16, num_gpu_blocks_override=40,
                   seed=0)
    yield llm
    llm.llm_engine.engine_core.shutdown()


def _prompts(model_dir):
    return random_prompts(model_dir, PROMPT_LENGTHS, seed=2)


def test_model_generates_the_cpu_tokens(llm, model_dir):
    vllm = _vllm()
    prompts = _prompts(model_dir)
    max_tokens = [NEW_TOKENS - (i % 3) * 4 for i in range(len(prompts))]
    params = [vllm.SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)
              for n in max_tokens]
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    got = [list(o.outputs[0].token_ids) for o in outs]
    want = cpu_greedy(model_dir, prompts, NEW_TOKENS)
    assert_batch_matches_cpu(got, want, prompts, max_tokens, f"{ARCH} prompt")


def test_steps_stay_compiled_and_on_the_device(llm, model_dir):
    vllm = _vllm()
    (before,) = llm.collective_rpc("rbln_stats")
    params = vllm.SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True)
    llm.generate([{"prompt_token_ids": p} for p in _prompts(model_dir)[:4]], params,
                 use_tqdm=False)
    (stats,) = llm.collective_rpc("rbln_stats")
    assert stats["steps"] > before["steps"], stats
    assert stats["warm"], stats
    assert all(v == 0 for v in stats["after_warm_up"].values()), stats
    assert set(stats["explain_verdicts"]) == {"clean"}, stats


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
