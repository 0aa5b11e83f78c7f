"""rbln::paged_attention: vLLM serving's attention over its paged KV cache
(issue 31), one op that the rbln compiler lowers to a kernel reading the
cache in place (frontend/ops/paged_attention_ops.cc, kernels/
paged_attention.h): each request's real context, block by block, instead of
its whole block table gathered and masked.

Its implementation off rbln programs (the CPU, eager calls) is the same
computation with ATen ops, `decomposed`: every request's blocks gathered by
its block-table row (index_select of whole blocks), a [B, Q, L] visibility
mask and SDPA over the padded context. Inside a program compiled for rbln
the op stays one node (fx_to_ir gives it to the compiler as
`paged_attention` with block_size, scale, sliding_window and soft_cap
attributes, and sinks as a fifth input when given).

Layout (vllm_rbln/paged_attention.py): the cache is [2, Hkv, num_blocks *
block_size, D] (keys then values, head-major); query [B*Q, Hq, D] holds Q
tokens per request; positions [B*Q] each token's position in its sequence;
the token of position p sees its request's keys 0..p (the last
sliding_window of them with a window), query head h reads kv head
h // (Hq // Hkv); a score q.k * scale is soft-capped to soft_cap *
tanh(score / soft_cap) with a cap (Gemma 2); with `sinks` [Hq] (gpt-oss's
attention sinks) head h's softmax also counts exp(sinks[h]) in its
denominator -- a key whose value is zero.
"""

import torch


def visible_mask(positions: torch.Tensor, batch: int, context: int,
                 sliding_window: int = None) -> torch.Tensor:
    """[B, Q, L] bool: which of its request's `context` gathered key positions
    each query sees."""
    key_pos = torch.arange(context, device=positions.device).view(1, 1, context)
    q_pos = positions.view(batch, -1, 1)
    visible = key_pos <= q_pos
    if sliding_window is not None:
        visible = visible & (key_pos > q_pos - sliding_window)
    return visible


def decomposed(query: torch.Tensor, cache: torch.Tensor, block_table: torch.Tensor,
               positions: torch.Tensor, block_size: int, scale: float,
               sliding_window: int = None, soft_cap: float = None,
               sinks: torch.Tensor = None) -> torch.Tensor:
    """The op with ATen ops (module docstring). Returns [B*Q, Hq, D]."""
    batch, num_table_blocks = block_table.shape
    tokens, num_heads, head_size = query.shape
    q_len = tokens // batch
    num_kv_heads = cache.shape[1]
    group = num_heads // num_kv_heads
    context = num_table_blocks * block_size

    # Whole blocks in table order: [2, Hkv, B * NB, block_size, D].
    blocks = cache.view(2, num_kv_heads, -1, block_size, head_size).index_select(
        2, block_table.reshape(-1))
    blocks = blocks.view(2, num_kv_heads, batch, context, head_size)
    keys, values = blocks[0], blocks[1]  # [Hkv, B, L, D] each, contiguous

    # Query heads h = kv_head * group + g (the GQA layout of HF and vLLM):
    # one row per (query, g) under each kv head, so no key is copied per group.
    q = query.view(batch, q_len, num_kv_heads, group, head_size)
    q = q.permute(2, 0, 1, 3, 4).reshape(num_kv_heads, batch, q_len * group, head_size)

    visible = visible_mask(positions, batch, context, sliding_window)
    mask = visible.view(1, batch, q_len, 1, context).expand(
        1, batch, q_len, group, context).reshape(1, batch, q_len * group, context)

    if soft_cap or sinks is not None:
        # SDPA has neither a soft cap nor sinks: the scores in float32
        # (opmath), capped, masked and normalized as the model's eager
        # attention does.
        scores = (q.float() @ keys.float().transpose(-1, -2)) * scale
        if soft_cap:
            scores = torch.tanh(scores / soft_cap) * soft_cap
        scores = scores.masked_fill(~mask, float("-inf"))
        if sinks is not None:
            # The sink as one more key column of each row, dropped after the
            # softmax (its value is zero); rows are (query, g) under kv head.
            sink = sinks.float().view(num_kv_heads, 1, 1, group, 1).expand(
                num_kv_heads, batch, q_len, group, 1).reshape(num_kv_heads, batch, -1, 1)
            probs = torch.cat([scores, sink], -1).softmax(-1)[..., :-1]
        else:
            probs = scores.softmax(-1)
        out = (probs.nan_to_num(0.0) @ values.float()).to(q.dtype)
    else:
        out = torch.nn.functional.scaled_dot_product_attention(
            q, keys.to(q.dtype), values.to(q.dtype), attn_mask=mask, scale=scale)
    out = out.view(num_kv_heads, batch, q_len, group, head_size).permute(1, 2, 0, 3, 4)
    return out.reshape(tokens, num_heads, head_size)


@torch.library.custom_op("rbln::paged_attention", mutates_args=())
def paged_attention(query: torch.Tensor, cache: torch.Tensor, block_table: torch.Tensor,
                    positions: torch.Tensor, block_size: int, scale: float,
                    sliding_window: int | None = None, soft_cap: float | None = None,
                    sinks: torch.Tensor | None = None) -> torch.Tensor:
    return decomposed(query, cache, block_table, positions, block_size, scale,
                      sliding_window, soft_cap, sinks)


@paged_attention.register_fake
def _(query, cache, block_table, positions, block_size, scale, sliding_window=None,
      soft_cap=None, sinks=None):
    torch._check(query.dim() == 3 and cache.dim() == 4 and block_table.dim() == 2,
                 lambda: "rbln::paged_attention: expected query [T, Hq, D], cache "
                         "[2, Hkv, S, D] and block_table [B, NB]")
    return torch.empty_like(query, memory_format=torch.contiguous_format)
