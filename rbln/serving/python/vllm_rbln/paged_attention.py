"""Paged attention as PyTorch ops the rbln compiler turns into device code
inside the model step's program (no vLLM here: the tests run it alone).

The KV cache of one layer is one tensor of `slots` rows, each holding the key
and the value of one token: `[num_blocks * block_size, 2, num_kv_heads,
head_size]`. A block is `block_size` consecutive rows; block 0 is vLLM's null
block, which no request owns, so padding tokens write there.

A step runs a grid of `B` requests x `Q` query tokens (`T = B * Q` tokens,
row-major: request b's tokens are rows b*Q .. b*Q+Q-1); each request's
queries attend to the first `position + 1` tokens of its own blocks:
  1. write: every token's key/value goes to its slot (`index_copy_` by the
     slot mapping) -- the program updates the cache in place;
  2. read: each request's blocks are gathered by its block-table row
     (`index` by the block table), `L = blocks * block_size` tokens;
  3. attend: the query of position p sees key positions 0..p (and, with a
     sliding window w, only the last w of them).
Writing before reading makes prefill, chunked prefill, prefix blocks and
decode one computation: the new tokens are in the cache when they are read.
"""

import torch


def cache_shape(num_blocks: int, block_size: int, num_kv_heads: int, head_size: int):
    """The shape of one layer's cache (module docstring)."""
    return (num_blocks * block_size, 2, num_kv_heads, head_size)


def write_kv(cache: torch.Tensor, slot_mapping: torch.Tensor, key: torch.Tensor,
             value: torch.Tensor) -> None:
    """cache[slot_mapping[t]] = (key[t], value[t]) for each token t, in place."""
    cache.index_copy_(0, slot_mapping, torch.stack((key, value), dim=1).to(cache.dtype))


def attend(query: torch.Tensor, cache: torch.Tensor, block_table: torch.Tensor,
           positions: torch.Tensor, block_size: int, scale: float,
           sliding_window: int = None) -> torch.Tensor:
    """Attention of `query` [B*Q, Hq, D] over the cached context of each
    request: `block_table` [B, NB] (block ids, int), `positions` [B*Q] (each
    query's position in its sequence). Returns [B*Q, Hq, D]."""
    batch, num_table_blocks = block_table.shape
    tokens, num_heads, head_size = query.shape
    q_len = tokens // batch
    num_kv_heads = cache.shape[2]
    group = num_heads // num_kv_heads
    context = num_table_blocks * block_size

    blocks = cache.view(-1, block_size, 2, num_kv_heads, head_size)[block_table]
    blocks = blocks.view(batch, context, 2, num_kv_heads, head_size)
    keys = blocks[:, :, 0].permute(0, 2, 1, 3)    # [B, Hkv, L, D]
    values = blocks[:, :, 1].permute(0, 2, 1, 3)  # [B, Hkv, L, D]

    # Query heads h = kv_head * group + g (the GQA layout of HF and vLLM):
    # one row per (query, g) under each kv head, so no key is copied per group.
    q = query.view(batch, q_len, num_kv_heads, group, head_size)
    q = q.permute(0, 2, 1, 3, 4).reshape(batch, num_kv_heads, q_len * group, head_size)

    key_pos = torch.arange(context, device=query.device)
    q_pos = positions.view(batch, q_len, 1)
    visible = key_pos.view(1, 1, context) <= q_pos  # [B, Q, L]
    if sliding_window is not None:
        visible = visible & (key_pos.view(1, 1, context) > q_pos - sliding_window)
    mask = visible.view(batch, 1, q_len, 1, context).expand(
        batch, 1, q_len, group, context).reshape(batch, 1, q_len * group, context)

    out = torch.nn.functional.scaled_dot_product_attention(
        q, keys.to(q.dtype), values.to(q.dtype), attn_mask=mask, scale=scale)
    out = out.view(batch, num_kv_heads, q_len, group, head_size).permute(0, 2, 1, 3, 4)
    return out.reshape(tokens, num_heads, head_size)


def reference(query, key, value, cache, slot_mapping, block_table, positions, block_size,
              scale, sliding_window=None):
    """The same step with Python loops over requests and tokens (float32),
    for the tests: updates `cache` and returns the attention output."""
    cache.index_copy_(0, slot_mapping, torch.stack((key, value), dim=1).to(cache.dtype))
    batch = block_table.shape[0]
    q_len = query.shape[0] // batch
    group = query.shape[1] // cache.shape[2]
    out = torch.zeros(query.shape, dtype=torch.float32)
    for t in range(query.shape[0]):
        b = t // q_len
        p = int(positions[t])
        first = 0 if sliding_window is None else max(0, p - sliding_window + 1)
        slots = [int(block_table[b, j // block_size]) * block_size + j % block_size
                 for j in range(first, p + 1)]
        k = cache[slots, 0].float()  # [n, Hkv, D]
        v = cache[slots, 1].float()
        for h in range(query.shape[1]):
            s = (k[:, h // group] @ query[t, h].float()) * scale
            out[t, h] = torch.softmax(s, 0) @ v[:, h // group]
    return out
