"""vLLM's mixture-of-experts layers (FusedMoE) on rbln.

vLLM leaves an out-of-tree platform three things to provide for an
unquantized MoE layer, and on rbln each becomes part of the compiled step:

- The experts (`RblnUnquantizedFusedMoEMethod`, vLLM's OOT override of
  UnquantizedFusedMoEMethod): the token-expert pairs sorted by expert, one
  grouped GEMM per projection over the sorted rows (the compiler's grouped
  GEMM, one oneDNN GEMM per expert on its rows, offsets as program data so
  one program serves every routing), each row's expert biases where the
  layer has them (gpt-oss), the gated activation (SiLU, GELU, or gpt-oss's
  clamped SwiGLU), the routing weights, the pairs summed back per token.
  Static shapes: tokens x top_k rows whatever the routing.
- The routing (`route`): softmax or sigmoid over the router logits in
  float32, top-k (of the scores plus a correction bias where vLLM's
  FusedTopKBiasRouter has one: ERNIE-4.5, MiniMax-M2), optional
  renormalization and scaling -- what vLLM's topk_softmax / topk_sigmoid
  kernels compute, in torch ops (those kernels are CUDA/CPU builds of vLLM's
  C++ library).
- The call path (`prepare_moe_layers`): vLLM calls an MoE layer through the
  opaque custom op `vllm.moe_forward` on every platform but the CPU and TPU,
  which would leave the experts out of the compiled program; here the layer
  is called directly, as on the CPU, so Dynamo traces it into the step.

vLLM internals used here: MoERunner (its _forward_entry and router),
FusedTopKRouter, FusedTopKBiasRouter, UnquantizedFusedMoEMethod and
CustomOp.register_oot,
MoEActivation, SharedExpertsOrder.
"""

import torch
import torch.nn.functional as F
from vllm.model_executor.layers.fused_moe.activation import MoEActivation
from vllm.model_executor.layers.fused_moe.router.fused_topk_bias_router import (
    FusedTopKBiasRouter,
)
from vllm.model_executor.layers.fused_moe.router.fused_topk_router import FusedTopKRouter
from vllm.model_executor.layers.fused_moe.runner import moe_runner
from vllm.model_executor.layers.fused_moe.runner.shared_experts import SharedExpertsOrder
from vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method import (
    UnquantizedFusedMoEMethod,
)


def _expert_mm(rows: torch.Tensor, w, offs: torch.Tensor) -> torch.Tensor:
    """rows (grouped by expert, groups ending at offs) times their expert's
    weight transposed: w [E, N, K] as stored, or MXFP4 (blocks, scales)
    (torch_rbln/_mxfp4.py: read packed, dequantized on the way)."""
    if isinstance(w, tuple):
        return torch.ops.rbln.grouped_mm_mxfp4(rows, w[0], w[1], offs)
    return _grouped_mm(rows, w.transpose(-2, -1), offs)


def _grouped_mm(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """Rows of `a` in groups ending at `offs`, group g times b[g]. Traced, the
    compiler's op: ATen's meta for _grouped_mm takes bfloat16 only off the
    CPU (CUDA's kernel), the device's takes float32 and float16 too."""
    if torch.compiler.is_compiling():
        return torch.ops.rbln.grouped_mm(a, b, offs)
    return torch._grouped_mm(a, b, offs=offs)


# gpt-oss's SwiGLU constants where the layer sets none (vLLM's
# SwigluOAIAndMul and its CPU kernel use the same).
_SWIGLU_ALPHA, _SWIGLU_LIMIT = 1.702, 7.0


def gated(h: torch.Tensor, activation: MoEActivation, swiglu_alpha: float = None,
           swiglu_limit: float = None) -> torch.Tensor:
    """act(gate) * up of h = [gate | up] (w13 packs w1 over w3); gpt-oss's
    (SWIGLUOAI): gate and up interleaved, clamped to `swiglu_limit`, (up + 1)
    * gate * sigmoid(alpha * gate)."""
    if activation == MoEActivation.SWIGLUOAI:
        alpha = _SWIGLU_ALPHA if swiglu_alpha is None else swiglu_alpha
        limit = _SWIGLU_LIMIT if swiglu_limit is None else swiglu_limit
        gate = h[:, ::2].clamp(max=limit)
        up = h[:, 1::2].clamp(min=-limit, max=limit)
        return (up + 1) * (gate * torch.sigmoid(gate * alpha))
    d = h.shape[-1] // 2
    gate, up = h[:, :d], h[:, d:]
    if activation == MoEActivation.SILU:
        return F.silu(gate) * up
    if activation == MoEActivation.GELU:
        return F.gelu(gate) * up
    if activation == MoEActivation.GELU_TANH:
        return F.gelu(gate, approximate="tanh") * up
    raise NotImplementedError(
        f"rbln: MoE activation {activation.value!r} is not supported on rbln "
        "(supported: silu, gelu, gelu_tanh, swigluoai)")


def grouped_experts(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor,
                    topk_weights: torch.Tensor, topk_ids: torch.Tensor,
                    activation: MoEActivation = MoEActivation.SILU,
                    apply_router_weight_on_input: bool = False, *,
                    w13_bias: torch.Tensor = None, w2_bias: torch.Tensor = None,
                    swiglu_alpha: float = None, swiglu_limit: float = None) -> torch.Tensor:
    """sum_j topk_weights[t, j] * expert_{topk_ids[t, j]}(x[t]) for every
    token t, with expert e(x) = w2[e] @ act(w13[e] @ x + w13_bias[e]) +
    w2_bias[e] (biases optional). x [T, H], w13 [E, 2I, H], w2 [E, H, I]
    (or each as MXFP4 (blocks, scales): _expert_mm), biases [E, 2I] and [E,
    H], topk_* [T, k]."""
    tokens, hidden = x.shape
    top_k = topk_ids.shape[1]
    experts = (w13[0] if isinstance(w13, tuple) else w13).shape[0]
    ids, perm = torch.sort(topk_ids.reshape(-1))
    rows = x.index_select(0, perm // top_k)
    weights = topk_weights.reshape(-1).index_select(0, perm).unsqueeze(-1)
    if apply_router_weight_on_input:
        rows = rows * weights.to(rows.dtype)
    # Rows per expert (ids past the last expert, vLLM's padding, fall out).
    counts = torch.histc(ids.int() if x.device.type != "cpu" else ids.float(),
                         bins=experts, min=0, max=experts - 1)
    offs = torch.cumsum(counts, 0, dtype=torch.int32)
    # Each row's expert (padding ids clamped: their rows are not summed).
    row_expert = ids.clamp(max=experts - 1)
    h = _expert_mm(rows, w13, offs)
    if w13_bias is not None:
        h = h + w13_bias.index_select(0, row_expert).to(h.dtype)
    y = _expert_mm(gated(h, activation, swiglu_alpha, swiglu_limit), w2, offs)
    if w2_bias is not None:
        y = y + w2_bias.index_select(0, row_expert).to(y.dtype)
    if not apply_router_weight_on_input:
        y = y * weights.to(y.dtype)
    inverse = torch.empty_like(perm)
    inverse[perm] = torch.arange(perm.numel(), device=perm.device)
    return y.index_select(0, inverse).view(tokens, top_k, hidden).sum(dim=1).to(x.dtype)


@UnquantizedFusedMoEMethod.register_oot
class RblnUnquantizedFusedMoEMethod(UnquantizedFusedMoEMethod):
    """The experts of an unquantized FusedMoE layer on rbln (grouped_experts)."""

    @property
    def is_monolithic(self) -> bool:
        return False  # The runner routes first (route), then calls apply.

    def forward_oot(self, layer, x, topk_weights, topk_ids, shared_experts,
                    shared_experts_input):
        if layer.expert_map is not None:
            raise NotImplementedError("rbln: expert parallelism (an expert map) is not supported")
        if shared_experts is not None:
            # Where a fused kernel would overlap them (the runner has already
            # run them if their order is NO_OVERLAP).
            shared_experts(shared_experts_input, SharedExpertsOrder.MK_INTERNAL_OVERLAPPED)
        return grouped_experts(x, layer.w13_weight, layer.w2_weight, topk_weights, topk_ids,
                               layer.activation, layer.apply_router_weight_on_input,
                               w13_bias=getattr(layer, "w13_bias", None),
                               w2_bias=getattr(layer, "w2_bias", None),
                               swiglu_alpha=getattr(layer, "swiglu_alpha", None),
                               swiglu_limit=getattr(layer, "swiglu_limit", None))

    forward_native = forward_oot


def route(router_logits: torch.Tensor, top_k: int, renormalize: bool,
          scoring_func: str = "softmax", correction_bias: torch.Tensor = None,
          routed_scaling_factor: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(topk_weights float32, topk_ids int32) as vLLM's topk_softmax /
    topk_sigmoid compute them: the experts of the top-k scores (plus
    `correction_bias`, which chooses the experts but does not weight them),
    weighted by their scores, renormalized, times routed_scaling_factor."""
    logits = router_logits.float()
    if scoring_func == "softmax":
        scores = torch.softmax(logits, dim=-1)
    elif scoring_func == "sigmoid":
        scores = torch.sigmoid(logits)
    else:
        raise NotImplementedError(f"rbln: MoE scoring function {scoring_func!r} is not supported")
    if correction_bias is None:
        weights, ids = torch.topk(scores, top_k, dim=-1)
    else:
        ids = torch.topk(scores + correction_bias.float(), top_k, dim=-1).indices
        weights = scores.gather(1, ids)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    if routed_scaling_factor != 1.0:
        weights = weights * routed_scaling_factor
    return weights, ids.to(torch.int32)


def _route_with_torch_ops(router):
    """`router`'s _compute_routing in torch ops (a FusedTopKRouter, or a
    FusedTopKBiasRouter with softmax/sigmoid scores); raises for routing
    that needs vLLM's other kernels."""
    bias = None
    scaling = 1.0
    if isinstance(router, FusedTopKBiasRouter):
        if (router.scoring_func not in ("softmax", "sigmoid")
                or router._hash_indices_table is not None or router.bias_vl is not None
                or router.num_fused_shared_experts > 0):
            raise NotImplementedError(
                f"rbln: MoE routing {router.scoring_func!r} with hash tables, vision biases or "
                "fused shared experts is not supported (softmax/sigmoid top-k with a correction "
                "bias is)")
        bias = router.e_score_correction_bias
        scaling = router.routed_scaling_factor

    def compute_routing(hidden_states, router_logits, indices_type, *, input_ids=None):
        weights, ids = route(router_logits, router.top_k, router.renormalize, router.scoring_func,
                             bias, scaling)
        return weights, ids if indices_type is None else ids.to(indices_type)

    return compute_routing


def prepare_moe_layers(model: torch.nn.Module) -> int:
    """Makes the model's MoE layers traceable into the step program: called
    directly (not through vllm.moe_forward), routed by `route`. Returns the
    number of MoE layers."""
    count = 0
    for module in model.modules():
        if not isinstance(module, moe_runner.MoERunner):
            continue
        count += 1
        # State the first forward would set lazily: set inside the traced
        # step, it fails the guards of the step's first capture, and the
        # first bucket would be captured again after warm-up.
        module.routed_experts._ensure_moe_quant_config_init()
        module._forward_entry = (moe_runner._moe_forward if module.shared_experts is None
                                 else moe_runner._moe_forward_shared)
        if isinstance(module.router, (FusedTopKRouter, FusedTopKBiasRouter)):
            module.router._compute_routing = _route_with_torch_ops(module.router)
    return count
