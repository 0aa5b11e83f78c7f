"""gpt-oss's MXFP4 experts (its checkpoints' format) on rbln.

A gpt-oss checkpoint stores each expert's projections in MXFP4 (OCP
microscaling): two 4-bit e2m1 values per byte, low nibble first, and one
e8m0 scale (2^(s - 127)) per 32 values along the input dimension. vLLM
loads them as uint8 tensors (GptOssMxfp4MoEMethod.create_weights: w13 [E,
2I, H/2] and its scales [E, 2I, H/32], w2 [E, H, I/2] and [E, H, I/32], the
biases in bfloat16) and picks a CUDA, ROCm or CPU kernel for them; on rbln
`RblnMxfp4MoEMethod` keeps the same uint8 tensors on the device (a quarter
of bfloat16's bytes: gpt-oss-20b's experts fit in 12 GB, not 39) and its
step dequantizes inside the compiled program:

- Fewer routed rows than experts (decode): each row's expert alone is
  gathered and dequantized, and each row is multiplied by its own
  expert (a batch of GEMVs): the step reads k experts' packed bytes per
  token, not all of them.
- Otherwise (prefill, large batches): every expert is dequantized once and
  the rows run as the unquantized layer's grouped GEMMs (moe.grouped_experts).

Dequantized values are exact in the activation dtype (e2m1 has one
mantissa bit; a scale is a power of two), so the layer computes what the
unquantized layer computes on the dequantized weights. The activations may
be bfloat16 (vLLM's choice for MXFP4) or float32/float16 here
(`install` widens the config's list), so a test can compare float32 tokens
with the CPU's.

vLLM internals used here: GptOssMxfp4Config._make_moe_method and
get_supported_act_dtypes (replaced on rbln by `install`),
GptOssMxfp4MoEMethod.create_weights (the parameters, as vLLM's gpt-oss
loader fills them).
"""

import torch
from vllm.model_executor.layers.fused_moe import FusedMoEMethodBase
from vllm.model_executor.layers.fused_moe.oracle.mxfp4 import Mxfp4MoeBackend
from vllm.model_executor.layers.quantization import mxfp4 as vllm_mxfp4

from . import moe

# e2m1 values by nibble (OCP MX: sign, 2 exponent bits, 1 mantissa bit).
FP4_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
              -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)
BLOCK = 32  # values per e8m0 scale

# vLLM's names of gpt-oss's MXFP4 (the checkpoint's and the normalized one).
QUANTIZATIONS = ("mxfp4", "gpt_oss_mxfp4")


def dequantize(blocks: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """[..., N, K] in `dtype` from MXFP4 `blocks` [..., N, K/2] (uint8, low
    nibble first) and `scales` [..., N, K/32] (uint8 e8m0)."""
    *lead, n, half = blocks.shape
    k = 2 * half
    lut = torch.tensor(FP4_VALUES, dtype=torch.float32, device=blocks.device)
    lo = (blocks & 0x0F).long()
    hi = (blocks >> 4).long()
    values = torch.stack([lut[lo], lut[hi]], dim=-1).view(*lead, n, k // BLOCK, BLOCK)
    # 2^(s - 127) exactly: s placed in a float32's exponent bits (s = 0, the
    # subnormal 2^-127, flushes to zero; s = 255 is e8m0's NaN: inf here).
    scale = (scales.to(torch.int32) << 23).view(torch.float32).unsqueeze(-1)
    return (values * scale).view(*lead, n, k).to(dtype)


def mxfp4_experts(x: torch.Tensor, w13: torch.Tensor, w13_scale: torch.Tensor,
                  w2: torch.Tensor, w2_scale: torch.Tensor, topk_weights: torch.Tensor,
                  topk_ids: torch.Tensor, activation, *, w13_bias: torch.Tensor = None,
                  w2_bias: torch.Tensor = None, swiglu_alpha: float = None,
                  swiglu_limit: float = None) -> torch.Tensor:
    """moe.grouped_experts on MXFP4 weights (w13 [E, 2I, H/2] with its
    scales [E, 2I, H/32], w2 [E, H, I/2] with [E, H, I/32]); see the module
    docstring for the two forms."""
    tokens, hidden = x.shape
    top_k = topk_ids.shape[1]
    experts = w13.shape[0]
    if tokens * top_k >= experts:
        return moe.grouped_experts(
            x, dequantize(w13, w13_scale, x.dtype), dequantize(w2, w2_scale, x.dtype),
            topk_weights, topk_ids, activation, w13_bias=w13_bias, w2_bias=w2_bias,
            swiglu_alpha=swiglu_alpha, swiglu_limit=swiglu_limit)
    # Row r = (token r // top_k, its choice r % top_k), with its own expert.
    ids = topk_ids.reshape(-1).long().clamp(0, experts - 1)
    rows = x.repeat_interleave(top_k, dim=0).unsqueeze(1)  # [R, 1, H]
    w = dequantize(w13.index_select(0, ids), w13_scale.index_select(0, ids), x.dtype)
    h = torch.bmm(rows, w.transpose(1, 2)).squeeze(1)  # [R, 2I]
    if w13_bias is not None:
        h = h + w13_bias.index_select(0, ids).to(h.dtype)
    g = moe.gated(h, activation, swiglu_alpha, swiglu_limit).unsqueeze(1)
    w = dequantize(w2.index_select(0, ids), w2_scale.index_select(0, ids), x.dtype)
    y = torch.bmm(g, w.transpose(1, 2)).squeeze(1)  # [R, H]
    if w2_bias is not None:
        y = y + w2_bias.index_select(0, ids).to(y.dtype)
    y = y * topk_weights.reshape(-1, 1).to(y.dtype)
    return y.view(tokens, top_k, hidden).sum(dim=1).to(x.dtype)


class RblnMxfp4MoEMethod(vllm_mxfp4.GptOssMxfp4MoEMethod):
    """gpt-oss's MXFP4 experts on rbln: vLLM's parameters (create_weights),
    kept packed on the device, computed by mxfp4_experts."""

    def __init__(self, moe_config):
        # GptOssMxfp4MoEMethod's own __init__ selects a CUDA/ROCm/CPU kernel.
        FusedMoEMethodBase.__init__(self, moe_config)
        self.weight_dtype = "gpt_oss_mxfp4"
        self.mxfp4_backend = Mxfp4MoeBackend.NONE

    @property
    def is_monolithic(self) -> bool:
        return False  # The runner routes first (moe.route), then calls apply.

    @property
    def skip_forward_padding(self) -> bool:
        return False

    @property
    def has_unpadded_output(self) -> bool:
        return False

    def maybe_roundup_sizes(self, hidden_size, intermediate_size_per_partition, act_dtype,
                            moe_parallel_config):
        # The kernels' alignment padding: none here.
        return FusedMoEMethodBase.maybe_roundup_sizes(
            self, hidden_size, intermediate_size_per_partition, act_dtype, moe_parallel_config)

    def process_weights_after_loading(self, layer) -> None:
        for name in ("w13_weight", "w2_weight", "w13_weight_scale", "w2_weight_scale"):
            t = getattr(layer, name)
            if t.dtype != torch.uint8:
                raise TypeError(f"rbln: MXFP4 expert tensor {name} is {t.dtype}, expected uint8")

    def get_fused_moe_quant_config(self, layer):
        return None

    def apply(self, layer, x, topk_weights, topk_ids, shared_experts, shared_experts_input):
        if layer.expert_map is not None:
            raise NotImplementedError("rbln: expert parallelism (an expert map) is not supported")
        if shared_experts is not None:
            shared_experts(shared_experts_input, moe.SharedExpertsOrder.MK_INTERNAL_OVERLAPPED)
        return mxfp4_experts(x, layer.w13_weight, layer.w13_weight_scale, layer.w2_weight,
                             layer.w2_weight_scale, topk_weights, topk_ids, layer.activation,
                             w13_bias=getattr(layer, "w13_bias", None),
                             w2_bias=getattr(layer, "w2_bias", None),
                             swiglu_alpha=getattr(layer, "swiglu_alpha", None),
                             swiglu_limit=getattr(layer, "swiglu_limit", None))


def install() -> None:
    """Makes vLLM's gpt-oss MXFP4 config build RblnMxfp4MoEMethod, with
    float32 and float16 activations allowed beside bfloat16 (the platform
    calls it when a model asks for MXFP4, the model runner before loading)."""
    config = vllm_mxfp4.GptOssMxfp4Config
    if getattr(config, "_rbln_installed", False):
        return
    config._make_moe_method = lambda self, moe_config: RblnMxfp4MoEMethod(moe_config)
    config.get_supported_act_dtypes = classmethod(
        lambda cls: [torch.bfloat16, torch.float16, torch.float32])
    config._rbln_installed = True
