"""Paged attention as PyTorch ops the rbln compiler turns into device code
inside the model step's program (no vLLM here: the tests run it alone).

The KV cache of one layer is one tensor `[2, num_kv_heads, num_blocks *
block_size, head_size]`: keys then values, each head's tokens in slot order.
A block is `block_size` consecutive slots; block 0 is vLLM's null block,
which no request owns, so padding tokens write there. Head-major, so that a
kv head's blocks are contiguous [block_size, head_size] runs the kernel
reads in place (and the gathered context of the ATen path is already the
`[kv head, request, token, dim]` operand attention multiplies).

A step runs a grid of `B` requests x `Q` query tokens (`T = B * Q` tokens,
row-major: request b's tokens are rows b*Q .. b*Q+Q-1); each request's
queries attend to the first `position + 1` tokens of its own blocks:
  1. write: every token's key/value goes to its slot (`index_copy_` by the
     slot mapping) -- the program updates the cache in place;
  2. read: each request's keys and values are read through its block-table
     row (on rbln in place, by the compiler's paged attention kernel;
     elsewhere `index_select` of whole blocks, `L = blocks * block_size`
     tokens);
  3. attend: the query of position p sees key positions 0..p (and, with a
     sliding window w, only the last w of them); with a soft cap c (Gemma
     2) a score s becomes c * tanh(s / c) before the softmax; with sinks
     (gpt-oss) head h's softmax also counts exp(sinks[h]), a key whose
     value is zero.
Writing before reading makes prefill, chunked prefill, prefix blocks and
decode one computation: the new tokens are in the cache when they are read.
"""

import torch
from torch_rbln._paged_attention import decomposed


def cache_shape(num_blocks: int, block_size: int, num_kv_heads: int, head_size: int):
    """The shape of one layer's cache (module docstring)."""
    return (2, num_kv_heads, num_blocks * block_size, head_size)


def write_kv(cache: torch.Tensor, slot_mapping: torch.Tensor, key: torch.Tensor,
             value: torch.Tensor) -> None:
    """cache[:, :, slot_mapping[t]] = (key[t], value[t]) for each token t, in place."""
    kv = torch.stack((key, value)).to(cache.dtype).transpose(1, 2)  # [2, Hkv, T, D]
    cache.index_copy_(2, slot_mapping, kv)


def attend(query: torch.Tensor, cache: torch.Tensor, block_table: torch.Tensor,
           positions: torch.Tensor, block_size: int, scale: float,
           sliding_window: int = None, soft_cap: float = None,
           sinks: torch.Tensor = None) -> torch.Tensor:
    """Attention of `query` [B*Q, Hq, D] over the cached context of each
    request: `block_table` [B, NB] (block ids, int), `positions` [B*Q] (each
    query's position in its sequence). Returns [B*Q, Hq, D].

    On rbln: torch.ops.rbln.paged_attention, which the compiler lowers to a
    kernel reading each request's real context in place (steps 2 and 3 in
    one, no gathered copy, no mask). Elsewhere: the same with ATen ops
    (torch_rbln._paged_attention.decomposed)."""
    if query.device.type == "rbln":
        return torch.ops.rbln.paged_attention(query, cache, block_table, positions, block_size,
                                              scale, sliding_window, soft_cap, sinks)
    return decomposed(query, cache, block_table, positions, block_size, scale,
                      sliding_window, soft_cap, sinks)


def reference(query, key, value, cache, slot_mapping, block_table, positions, block_size,
              scale, sliding_window=None, soft_cap=None, sinks=None):
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
            if soft_cap:
                s = soft_cap * torch.tanh(s / soft_cap)
            # A sink: one more logit, of a key whose value is zero.
            logits = s if sinks is None else torch.cat([s, sinks[h].float().view(1)])
            out[t, h] = torch.softmax(logits, 0)[:len(s)] @ v[:, h // group]
    return out
