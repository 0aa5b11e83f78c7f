"""vllm_rbln/mxfp4.py's MXFP4 experts (gpt-oss's checkpoint format) against
a dense reference on weights dequantized by transformers' own MXFP4 code,
eager on the host and compiled for rbln (the compiler's MXFP4 grouped GEMM:
a fused GEMV for an expert's few rows, oneDNN on a dequantized copy for
many). Also the test models' MXFP4
writer against the same dequantization, and the platform's quantization
check. Runs in the serving venv
(serving_venv.py); no vLLM engine."""
# spec: J2

import sys

from serving_venv import reexec_in_serving_venv

if __name__ == "__main__":
    reexec_in_serving_venv(__file__)

import os

import pytest
import torch

# Every op compiled for rbln or a failure (no silent CPU run).
os.environ["TORCH_RBLN_DISABLE_FALLBACK"] = "all"


def _transformers_dequantize(blocks, scales):
    """[E, N, K] float32 by transformers (its layout is [E, K, N])."""
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    e, n, half = blocks.shape
    packed = blocks.view(e, n, half // 16, 16)
    return convert_moe_packed_tensors(packed, scales, dtype=torch.float32).transpose(1, 2)


def _random_mxfp4(experts, n, k, generator):
    blocks = torch.randint(0, 256, (experts, n, k // 2), dtype=torch.uint8, generator=generator)
    # Scales around 2^-4 (e8m0 123), a spread of 8 binades.
    scales = torch.randint(119, 127, (experts, n, k // 32), dtype=torch.uint8,
                           generator=generator)
    return blocks, scales


def test_dequantize_and_the_grouped_product_match_transformers():
    from torch_rbln import _mxfp4

    g = torch.Generator().manual_seed(0)
    blocks, scales = _random_mxfp4(3, 8, 64, g)
    scales[0, 0, 1] = 1  # 2^-126, the smallest normal scale
    scales[0, 1, 1] = 200  # 2^73
    want = _transformers_dequantize(blocks, scales)
    torch.testing.assert_close(_mxfp4.dequantize(blocks, scales), want, atol=0, rtol=0)
    # The compiler's op: group 0 one row (the fused GEMV), group 1 none,
    # group 2 eleven rows (a dequantized copy through oneDNN), rows 12..13 in
    # no group (zero).
    offs = torch.tensor([1, 1, 12], dtype=torch.int32)
    compiled = torch.compile(torch.ops.rbln.grouped_mm_mxfp4, backend="rbln", dynamic=False)
    for dtype in (torch.float32, torch.bfloat16):
        a = torch.randn(14, 64, generator=g).to(dtype)
        ref = torch.zeros(14, 8, dtype=torch.float64)
        ref[0:1] = a[0:1].double() @ want[0].double().T
        ref[1:12] = a[1:12].double() @ want[2].double().T
        eager = torch.ops.rbln.grouped_mm_mxfp4(a, blocks, scales, offs)
        got = compiled(a.to("rbln"), blocks.to("rbln"), scales.to("rbln"), offs.to("rbln")).cpu()
        assert got.dtype == eager.dtype == dtype
        # f32 sums of exact products, rounded once to the output dtype.
        tol = dict(atol=1e-3, rtol=1e-5) if dtype == torch.float32 else dict(atol=0.05, rtol=1e-2)
        torch.testing.assert_close(eager.double(), ref, **tol)
        torch.testing.assert_close(got.double(), ref, **tol)
        assert (got[12:] == 0).all()


def test_test_model_writer_round_trips():
    from vllm_rbln.testing import local_model

    w = torch.randn(2, 16, 64) * 0.1
    blocks, scales = local_model.quantize_mxfp4(w)
    assert blocks.shape == (2, 16, 2, 16) and scales.shape == (2, 16, 2)
    deq = _transformers_dequantize(blocks.flatten(-2), scales)
    torch.testing.assert_close(deq, local_model.dequantize_mxfp4(blocks, scales), atol=0, rtol=0)
    # Within 2 scales: half e2m1's largest step (2), or a value in (6, 8)
    # scales clamped to 6.
    step = torch.exp2(scales.float() - 127).repeat_interleave(32, -1)
    assert ((deq - w).abs() <= 2 * step).all()
    # Idempotent: the dequantized values quantize to the same bytes.
    again = local_model.quantize_mxfp4(deq)
    assert torch.equal(again[0], blocks) and torch.equal(again[1], scales)


def test_platform_takes_mxfp4_and_names_other_methods():
    from vllm.model_executor.layers.quantization.mxfp4 import GptOssMxfp4Config
    from vllm_rbln.mxfp4 import RblnMxfp4MoEMethod
    from vllm_rbln.platform import RblnPlatform

    RblnPlatform.verify_quantization("gpt_oss_mxfp4")
    assert torch.float32 in GptOssMxfp4Config.get_supported_act_dtypes()
    assert type(GptOssMxfp4Config()._make_moe_method(None)) is RblnMxfp4MoEMethod
    # Any other method: vLLM's own message at start, not a CUDA kernel missing
    # at the first step.
    for other in ("fp8", "awq", "gptq"):
        with pytest.raises(ValueError, match=f"{other} quantization is currently not supported "
                           "in rbln"):
            RblnPlatform.verify_quantization(other)


# Decode (1 token: one row per chosen expert, the fused GEMV), a few tokens,
# and enough for groups over 8 rows (oneDNN on a dequantized copy).
@pytest.mark.parametrize("tokens", [1, 3, 40])
def test_experts_match_a_dense_reference(tokens):
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    from vllm_rbln import moe, mxfp4

    g = torch.Generator().manual_seed(tokens)
    hidden, inter, experts, top_k = 64, 32, 6, 2
    w13, s13 = _random_mxfp4(experts, 2 * inter, hidden, g)
    w2, s2 = _random_mxfp4(experts, hidden, inter, g)
    b13 = torch.randn(experts, 2 * inter, generator=g)
    b2 = torch.randn(experts, hidden, generator=g)
    x = torch.randn(tokens, hidden, generator=g) * 4
    logits = torch.randn(tokens, experts, generator=g)
    weights, ids = moe.route(logits, top_k, True)
    d13, d2 = _transformers_dequantize(w13, s13), _transformers_dequantize(w2, s2)

    def swiglu_oai(h):
        gate, up = h[::2].clamp(max=7.0), h[1::2].clamp(-7.0, 7.0)
        return (up + 1) * gate * torch.sigmoid(1.702 * gate)

    want = torch.zeros(tokens, hidden)
    for t in range(tokens):
        for j in range(top_k):
            e = int(ids[t, j])
            want[t] += weights[t, j] * (d2[e] @ swiglu_oai(d13[e] @ x[t] + b13[e]) + b2[e])
    args = (x, w13, s13, w2, s2, weights, ids, MoEActivation.SWIGLUOAI)
    biases = dict(w13_bias=b13, w2_bias=b2)
    got = mxfp4.mxfp4_experts(*args, **biases)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-5)
    compiled = torch.compile(mxfp4.mxfp4_experts, backend="rbln", dynamic=False)
    got = compiled(*[a.to("rbln") for a in args[:7]], args[7],
                   **{k: v.to("rbln") for k, v in biases.items()})
    torch.testing.assert_close(got.cpu(), want, atol=1e-4, rtol=1e-5)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
