"""vllm_rbln/moe.py's routing and experts alone against a dense per-token
reference, eager on the host and compiled for rbln: softmax/sigmoid top-k
with and without renormalizing, with a correction bias and scaling, SiLU
and GELU experts, gpt-oss's experts (biases, clamped interleaved SwiGLU),
an expert no token routes to, and top-1 weighting of the input. Runs in the serving venv
(serving_venv.py); no vLLM engine."""
# spec: J2

import sys

from serving_venv import reexec_in_serving_venv

if __name__ == "__main__":
    reexec_in_serving_venv(__file__)

import pytest
import torch


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
    # A correction bias chooses the experts but does not weight them
    # (GLM-4.5's sigmoid routing), then the weights are scaled.
    bias = torch.randn(experts) * 0.5
    for scoring in ("sigmoid", "softmax"):
        weights, ids = moe.route(logits, top_k, True, scoring, bias, 2.5)
        scores = logits.softmax(-1) if scoring == "softmax" else logits.sigmoid()
        want_ids = (scores + bias).topk(top_k, -1).indices
        want_w = scores.gather(1, want_ids)
        want_w = want_w / want_w.sum(-1, keepdim=True) * 2.5
        assert not torch.equal(want_ids, scores.topk(top_k, -1).indices)  # the bias matters
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
    # gpt-oss: expert biases and the SwiGLU of interleaved gate/up rows,
    # clamped at 7 (inputs large enough that some values pass the limit).
    b13 = torch.randn(experts, 2 * inter) * 2
    b2 = torch.randn(experts, hidden)
    xs = x * 8

    def swiglu_oai(h):
        gate, up = h[::2].clamp(max=7.0), h[1::2].clamp(-7.0, 7.0)
        return (up + 1) * gate * torch.sigmoid(1.702 * gate)

    want = torch.zeros(tokens, hidden)
    clamped = 0
    for t in range(tokens):
        for j in range(top_k):
            e = int(ids[t, j])
            h = w13[e] @ xs[t] + b13[e]
            clamped += int((h.abs() > 7.0).sum())
            want[t] += weights[t, j] * (w2[e] @ swiglu_oai(h) + b2[e])
    assert clamped > 0
    biased = dict(w13_bias=b13, w2_bias=b2)
    got = moe.grouped_experts(xs, w13, w2, weights, ids, MoEActivation.SWIGLUOAI, **biased)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-5)
    compiled = torch.compile(moe.grouped_experts, backend="rbln", dynamic=False)
    got = compiled(xs.to("rbln"), *on_device[1:], MoEActivation.SWIGLUOAI,
                   **{k: v.to("rbln") for k, v in biased.items()})
    torch.testing.assert_close(got.cpu(), want, atol=1e-4, rtol=1e-5)
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
