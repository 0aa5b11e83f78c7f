"""gpt-oss's MXFP4 experts (its checkpoints' format) on rbln.

A gpt-oss checkpoint stores each expert's projections in MXFP4 (OCP
microscaling): two 4-bit e2m1 values per byte, low nibble first, and one
e8m0 scale (2^(s - 127)) per 32 values along the input dimension. vLLM
loads them as uint8 tensors (GptOssMxfp4MoEMethod.create_weights: w13 [E,
2I, H/2] and its scales [E, 2I, H/32], w2 [E, H, I/2] and [E, H, I/32], the
biases in bfloat16) and picks a CUDA, ROCm or AMX kernel for them; on rbln
`RblnMxfp4MoEMethod` keeps the same uint8 tensors on the device (4.25 bits
a weight: gpt-oss-20b's experts take 12 GB, not 39 in bfloat16) and runs
the unquantized layer's computation (moe.grouped_experts: rows sorted by
expert, one grouped product per projection) with each projection the
compiler's MXFP4 grouped GEMM (rbln::grouped_mm_mxfp4,
kernels/mxfp4_grouped_gemm.h): only the routed experts' bytes are read,
decoded on the way -- a fused GEMV for an expert's few rows at decode, a
dequantized copy of the expert multiplied through oneDNN for many.

The activations may be bfloat16 (vLLM's choice for MXFP4) or float32 here
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

# vLLM's names of gpt-oss's MXFP4 (the checkpoint's and the normalized one).
QUANTIZATIONS = ("mxfp4", "gpt_oss_mxfp4")


def mxfp4_experts(x: torch.Tensor, w13: torch.Tensor, w13_scale: torch.Tensor,
                  w2: torch.Tensor, w2_scale: torch.Tensor, topk_weights: torch.Tensor,
                  topk_ids: torch.Tensor, activation, **kwargs) -> torch.Tensor:
    """moe.grouped_experts on MXFP4 weights: w13 [E, 2I, H/2] with its scales
    [E, 2I, H/32], w2 [E, H, I/2] with [E, H, I/32]; `kwargs` as there
    (biases, SwiGLU constants)."""
    return moe.grouped_experts(x, (w13, w13_scale), (w2, w2_scale), topk_weights, topk_ids,
                               activation, **kwargs)


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
    float32 activations allowed beside bfloat16 (the platform
    calls it when a model asks for MXFP4, the model runner before loading)."""
    config = vllm_mxfp4.GptOssMxfp4Config
    if getattr(config, "_rbln_installed", False):
        return
    config._make_moe_method = lambda self, moe_config: RblnMxfp4MoEMethod(moe_config)
    config.get_supported_act_dtypes = classmethod(lambda cls: [torch.bfloat16, torch.float32])
    config._rbln_installed = True
