"""Paged attention as PyTorch ops the rbln compiler turns into device code
inside the model step's program (no vLLM here: the tests run it alone).

The KV cache of one layer is one tensor `[2, num_kv_heads, num_blocks *
block_size, head_size]`: keys then values, each head's tokens in slot order.
A block is `block_size` consecutive slots; block 0 is vLLM's null block,
which no request owns, so padding tokens write there. Head-major, so that a
request's gathered context is already the `[kv head, request, token, dim]`
operand attention multiplies: the gather is the only copy of the context.

A step runs a grid of `B` requests x `Q` query tokens (`T = B * Q` tokens,
row-major: request b's tokens are rows b*Q .. b*Q+Q-1); each request's
queries attend to the first `position + 1` tokens of its own blocks:
  1. write: every token's key/value goes to its slot (`index_copy_` by the
     slot mapping) -- the program updates the cache in place;
  2. read: each request's blocks are gathered by its block-table row
     (`index_select` of whole blocks), `L = blocks * block_size` tokens;
  3. attend: the query of position p sees key positions 0..p (and, with a
     sliding window w, only the last w of them).
Writing before reading makes prefill, chunked prefill, prefix blocks and
decode one computation: the new tokens are in the cache when they are read.
"""

import torch


def cache_shape(num_blocks: int, block_size: int, num_kv_heads: int, head_size: int):
    """The shape of one layer's cache (module docstring)."""
    return (2, num_kv_heads, num_blocks * block_size, head_size)


def write_kv(cache: torch.Tensor, slot_mapping: torch.Tensor, key: torch.Tensor,
             value: torch.Tensor) -> None:
    """cache[:, :, slot_mapping[t]] = (key[t], value[t]) for each token t, in place."""
    kv = torch.stack((key, value)).to(cache.dtype).transpose(1, 2)  # [2, Hkv, T, D]
    cache.index_copy_(2, slot_mapping, kv)


def visible_mask(positions: torch.Tensor, batch: int, context: int,
                 sliding_window: int = None) -> torch.Tensor:
    """[B, Q, L] bool: which of its request's `context` gathered key positions
    each query sees (step 3 above). The model runner computes it on the host
    once per call for every layer without a sliding window."""
    key_pos = torch.arange(context, device=positions.device).view(1, 1, context)
    q_pos = positions.view(batch, -1, 1)
    visible = key_pos <= q_pos
    if sliding_window is not None:
        visible = visible & (key_pos > q_pos - sliding_window)
    return visible


def attend(query: torch.Tensor, cache: torch.Tensor, block_table: torch.Tensor,
           positions: torch.Tensor, block_size: int, scale: float,
           sliding_window: int = None, visible: torch.Tensor = None) -> torch.Tensor:
    """Attention of `query` [B*Q, Hq, D] over the cached context of each
    request: `block_table` [B, NB] (block ids, int), `positions` [B*Q] (each
    query's position in its sequence). `visible`: visible_mask(positions, B,
    NB * block_size, sliding_window) if the caller has it. Returns [B*Q, Hq, D]."""
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

    if visible is None:
        visible = visible_mask(positions, batch, context, sliding_window)
    mask = visible.view(1, batch, q_len, 1, context).expand(
        1, batch, q_len, group, context).reshape(1, batch, q_len * group, context)

    out = torch.nn.functional.scaled_dot_product_attention(
        q, keys.to(q.dtype), values.to(q.dtype), attn_mask=mask, scale=scale)
    out = out.view(num_kv_heads, batch, q_len, group, head_size).permute(1, 2, 0, 3, 4)
    return out.reshape(tokens, num_heads, head_size)


def reference(query, key, value, cache, slot_mapping, block_table, positions, block_size,
              scale, sliding_window=None):
    """The same step with Python loops over requests and tokens (float32),
    for the tests: updates `cache` and returns the attention output."""
    write_kv(cache, slot_mapping, key, value)
    batch = block_table.shape[0]
    q_len = query.shape[0] // batch
    group = query.shape[1] // cache.shape[1]
    out = torch.zeros(query.shape, dtype=torch.float32)
    for t in range(query.shape[0]):
        b = t // q_len
        p = int(positions[t])
        first = 0 if sliding_window is None else max(0, p - sliding_window + 1)
        slots = [int(block_table[b, j // block_size]) * block_size + j % block_size
                 for j in range(first, p + 1)]
        k = cache[0][:, slots].transpose(0, 1).float()  # [n, Hkv, D]
        v = cache[1][:, slots].transpose(0, 1).float()
        for h in range(query.shape[1]):
            s = (k[:, h // group] @ query[t, h].float()) * scale
            out[t, h] = torch.softmax(s, 0) @ v[:, h // group]
    return out
