"""Mixture-of-experts models served by vLLM on rbln (vllm_rbln/moe.py): the
architecture in RBLN_TEST_MOE_ARCH (qwen3_moe, qwen2_moe with its gated
shared expert, mixtral; one per Bazel target, one vLLM engine per process)
generates CPU transformers' greedy tokens for a batch of prompts of
different lengths, continuously batched with chunked prefill; the experts,
the routing and the shared expert run inside the compiled step (no
`vllm.moe_forward` custom op, no CPU fallback: TORCH_RBLN_DISABLE_FALLBACK=
all), and the steps never compile after warm-up. Also the experts and the
routing alone against a dense per-token reference.
Runs in the serving venv (serving_venv.py)."""
# spec: J1, J2, I6

import os
import sys

from serving_venv import reexec_in_serving_venv

if __name__ == "__main__":
    reexec_in_serving_venv(__file__)

import pytest
import torch

from token_check import assert_batch_matches_cpu, cpu_greedy, random_prompts
from vllm_rbln.testing.local_model import write_model_dir

ARCH = os.environ.get("RBLN_TEST_MOE_ARCH", "qwen3_moe")
NEW_TOKENS = 12
PROMPT_LENGTHS = (3, 9, 17, 31, 64, 65)


def _vllm():
    os.environ["TORCH_RBLN_DISABLE_FALLBACK"] = "all"
    os.environ["VLLM_RBLN_EXPLAIN"] = "1"
    import vllm

    return vllm


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    # Initializing the experts' weights runs parallel CPU ops here (OpenMP
    # threads up) before vLLM starts its engine process: a forked engine
    # would wait forever on the dead thread pool; vllm-rbln spawns it.
    return write_model_dir(str(tmp_path_factory.mktemp(ARCH)), ARCH)


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


def test_moe_model_generates_the_cpu_tokens(llm, model_dir):
    vllm = _vllm()
    prompts = _prompts(model_dir)
    max_tokens = [NEW_TOKENS - (i % 3) * 4 for i in range(len(prompts))]
    params = [vllm.SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)
              for n in max_tokens]
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    got = [list(o.outputs[0].token_ids) for o in outs]
    want = cpu_greedy(model_dir, prompts, NEW_TOKENS)
    assert_batch_matches_cpu(got, want, prompts, max_tokens, f"{ARCH} prompt")


def test_moe_steps_stay_compiled_and_on_the_device(llm, model_dir):
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


def test_experts_and_routing_match_a_dense_reference():
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    from vllm_rbln import moe

    torch.manual_seed(0)
    tokens, hidden, inter, experts, top_k = 9, 32, 16, 6, 2
    x = torch.randn(tokens, hidden)
    w13 = torch.randn(experts, 2 * inter, hidden) * 0.2
    w2 = torch.randn(experts, hidden, inter) * 0.2
    logits = torch.randn(tokens, experts)
    logits[:, 5] = -30.0  # Expert 5 gets no rows: an empty group.
    for scoring, renormalize in (("softmax", True), ("softmax", False), ("sigmoid", True)):
        weights, ids = moe.route(logits, top_k, renormalize, scoring)
        scores = logits.softmax(-1) if scoring == "softmax" else logits.sigmoid()
        want_w, want_ids = scores.topk(top_k, -1)
        if renormalize:
            want_w = want_w / want_w.sum(-1, keepdim=True)
        assert ids.dtype == torch.int32 and weights.dtype == torch.float32
        assert torch.equal(ids.long(), want_ids)
        torch.testing.assert_close(weights, want_w)

    weights, ids = moe.route(logits, top_k, True)
    on_device = [t.to("rbln") for t in (x, w13, w2, weights, ids)]
    for activation, act in ((MoEActivation.SILU, torch.nn.functional.silu),
                            (MoEActivation.GELU, torch.nn.functional.gelu)):
        want = torch.zeros(tokens, hidden)
        for t in range(tokens):
            for j in range(top_k):
                e = int(ids[t, j])
                h = w13[e] @ x[t]
                want[t] += weights[t, j] * (w2[e] @ (act(h[:inter]) * h[inter:]))
        got = moe.grouped_experts(x, w13, w2, weights, ids, activation)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        compiled = torch.compile(moe.grouped_experts, backend="rbln", dynamic=False)
        torch.testing.assert_close(compiled(*on_device, activation).cpu(), want,
                                   atol=1e-5, rtol=1e-5)
    # Top-1 routing weighted before the experts (apply_router_weight_on_input).
    weights1, ids1 = moe.route(logits, 1, False)
    def expert(e, v):
        h = w13[e] @ v
        return w2[e] @ (torch.nn.functional.silu(h[:inter]) * h[inter:])

    want = torch.stack([expert(int(ids1[t, 0]), weights1[t, 0] * x[t]) for t in range(tokens)])
    got = moe.grouped_experts(x, w13, w2, weights1, ids1, MoEActivation.SILU,
                              apply_router_weight_on_input=True)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
