"""The rbln attention backend for vLLM: paged attention (paged_attention.py)
traced into the model step's program.

vLLM builds attention metadata once per scheduler step for all its requests
(`RblnAttentionMetadataBuilder.build`: host tensors, kept as they are). The
model runner cuts the step into calls of bucketed shapes and, for each,
puts an `RblnCallMetadata` of device tensors into vLLM's forward context;
`RblnAttentionImpl.forward` reads that while Dynamo traces the step, so the
cache write and the paged read are ops of the step's graph.

vLLM internals used here: the AttentionBackend / AttentionImpl /
AttentionMetadataBuilder interfaces (vllm.v1.attention.backend) and the
backend registry (AttentionBackendEnum.CUSTOM).
"""

from dataclasses import dataclass
from typing import ClassVar

import torch
from vllm.v1.attention.backend import (
    AttentionBackend,
    AttentionImpl,
    AttentionMetadataBuilder,
    AttentionType,
    CommonAttentionMetadata,
    MultipleOf,
)
from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

from . import paged_attention


@dataclass
class RblnStepMetadata:
    """One scheduler step, as vLLM's runner prepared it (host tensors)."""

    num_reqs: int
    query_start_loc: torch.Tensor  # [num_reqs + 1], int32
    seq_lens: torch.Tensor  # [num_reqs]
    block_table: torch.Tensor  # [>= num_reqs, max blocks per request], int32
    slot_mapping: torch.Tensor  # [tokens], int64


@dataclass
class RblnCallMetadata:
    """One program call of a step: a grid of `B` requests x `Q` tokens, as
    device tensors (paged_attention.attend)."""

    slot_mapping: torch.Tensor  # [B*Q] int64
    block_table: torch.Tensor  # [B, NB] int64
    positions: torch.Tensor  # [B*Q] int64 (the kernel derives each query's keys)


class RblnAttentionMetadataBuilder(AttentionMetadataBuilder[RblnStepMetadata]):
    # Decodes first (vLLM keeps the order stable between steps); the runner
    # packs every token of a step into one call in this order.
    reorder_batch_threshold: int | None = 1

    def __init__(self, kv_cache_spec, layer_names, vllm_config, device):
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)

    def build(self, common_prefix_len: int, common_attn_metadata: CommonAttentionMetadata,
              fast_build: bool = False) -> RblnStepMetadata:
        m = common_attn_metadata
        return RblnStepMetadata(
            num_reqs=m.num_reqs,
            query_start_loc=m.query_start_loc_cpu,
            seq_lens=m.seq_lens,
            block_table=m.block_table_tensor,
            slot_mapping=m.slot_mapping,
        )


class RblnAttentionImpl(AttentionImpl):
    def __init__(self, num_heads: int, head_size: int, scale: float, num_kv_heads: int,
                 alibi_slopes, sliding_window, kv_cache_dtype: str, logits_soft_cap=None,
                 attn_type: str = AttentionType.DECODER, kv_sharing_target_layer_name=None,
                 sinks=None) -> None:
        if alibi_slopes is not None:
            raise NotImplementedError("rbln attention: ALiBi is not supported")
        if attn_type != AttentionType.DECODER:
            raise NotImplementedError(
                f"rbln attention: only decoder self-attention is supported, not {attn_type}")
        if kv_cache_dtype != "auto":
            raise NotImplementedError(
                f"rbln attention: kv_cache_dtype={kv_cache_dtype!r}; the cache is kept in the "
                "model's dtype (kv_cache_dtype='auto')")
        self.num_heads = num_heads
        self.head_size = head_size
        self.scale = float(scale)
        self.num_kv_heads = num_kv_heads
        self.sliding_window = sliding_window
        # Gemma 2's attention logit soft-capping (0 or None: none).
        self.soft_cap = float(logits_soft_cap) if logits_soft_cap else None
        # gpt-oss's attention sinks: the model's parameter [num_heads], its
        # loaded values read by every step.
        if sinks is not None and sinks.shape != (num_heads,):
            raise ValueError(f"rbln attention: sinks of shape {tuple(sinks.shape)}, expected "
                             f"one per query head ({num_heads},)")
        self.sinks = sinks
        self.kv_sharing_target_layer_name = kv_sharing_target_layer_name
        self.block_size = None  # Set by the model runner with the cache.

    def forward(self, layer, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                kv_cache: torch.Tensor, attn_metadata, output: torch.Tensor,
                output_scale=None, output_block_scale=None) -> torch.Tensor:
        if output_scale is not None or output_block_scale is not None:
            raise NotImplementedError("rbln attention: fused output quantization")
        if not isinstance(attn_metadata, RblnCallMetadata):
            return output  # vLLM's profiling run without metadata.
        meta = attn_metadata
        if self.kv_sharing_target_layer_name is None:
            paged_attention.write_kv(kv_cache, meta.slot_mapping, key, value)
        out = paged_attention.attend(
            query, kv_cache, meta.block_table, meta.positions, self.block_size, self.scale,
            self.sliding_window, self.soft_cap, self.sinks)
        output.copy_(out.view(output.shape))
        return output


class RblnAttentionBackend(AttentionBackend):
    # The cache write is part of forward() (one op of the step's program).
    forward_includes_kv_cache_update: bool = True
    supported_dtypes: ClassVar[list[torch.dtype]] = [torch.float16, torch.bfloat16,
                                                      torch.float32]
    supported_kv_cache_dtypes: ClassVar[list] = ["auto"]

    @staticmethod
    def get_name() -> str:
        return "CUSTOM"  # vLLM's name for an out-of-tree backend (registered below).

    @staticmethod
    def get_impl_cls():
        return RblnAttentionImpl

    @staticmethod
    def get_builder_cls():
        return RblnAttentionMetadataBuilder

    @staticmethod
    def get_supported_kernel_block_sizes(kv_cache_spec=None):
        return [MultipleOf(1)]

    @classmethod
    def get_supported_head_sizes(cls) -> list[int]:
        return []  # Any head size.

    @classmethod
    def supports_attn_type(cls, attn_type: str) -> bool:
        return attn_type == AttentionType.DECODER

    @classmethod
    def supports_sliding_window(cls) -> bool:
        return True

    @classmethod
    def supports_sink(cls) -> bool:
        return True  # gpt-oss's attention sinks (rbln::paged_attention's sinks)


register_backend(AttentionBackendEnum.CUSTOM,
                 f"{RblnAttentionBackend.__module__}.{RblnAttentionBackend.__qualname__}")
