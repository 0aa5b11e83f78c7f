"""Paged attention (paged_attention.py) compiled by torch.compile(backend=
"rbln") against the same step written with loops on the CPU: the cache write
by slot mapping and the paged read by block table are ops of the program (no
CPU fallback, no host op; the read is rbln::paged_attention, the compiler's
kernel over the cache in place), for decode grids, a prefill after cached
prefix blocks, grouped-query heads, a sliding window, soft-capped scores
(Gemma 2) and attention sinks (gpt-oss), in float32, float16 and bfloat16;
off rbln the op is its ATen decomposition."""
# spec: J1, J2, I6

import os
import sys

os.environ.setdefault("TORCH_RBLN_DISABLE_FALLBACK", "all")

import pytest
import torch

from vllm_rbln import paged_attention as pa

BLOCK = 4
NUM_BLOCKS = 12
KV_HEADS, GROUP, HEAD = 2, 2, 16


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()  # Each case is a new shape of the same function.
    yield


def _step(q, k, v, cache, slots, table, positions, window, soft_cap, sinks=None):
    pa.write_kv(cache, slots, k, v)
    return pa.attend(q, cache, table, positions, BLOCK, 0.25, window, soft_cap, sinks)


# One sink logit per query head: ordinary ones, one that outweighs every
# key (the output ~0) and -inf (none).
SINKS = torch.tensor([0.5, -1.0, 6.0, float("-inf")])


def _case(batch, q_len, starts, tables, dtype, seed=0):
    """A grid of `batch` x `q_len` queries; request b's queries are at
    positions starts[b].. and its blocks tables[b]; the cache holds earlier
    tokens (random), padding rows write the null block."""
    g = torch.Generator().manual_seed(seed)
    cache = torch.randn(pa.cache_shape(NUM_BLOCKS, BLOCK, KV_HEADS, HEAD), generator=g).to(dtype)
    table = torch.zeros(batch, 6, dtype=torch.int64)
    positions, slots = [], []
    for b in range(batch):
        table[b, :len(tables[b])] = torch.tensor(tables[b])
        for j in range(q_len):
            p = starts[b] + j
            positions.append(p)
            slots.append(int(table[b, p // BLOCK]) * BLOCK + p % BLOCK)
    tokens = batch * q_len
    q = torch.randn(tokens, KV_HEADS * GROUP, HEAD, generator=g).to(dtype)
    k = torch.randn(tokens, KV_HEADS, HEAD, generator=g).to(dtype)
    v = torch.randn(tokens, KV_HEADS, HEAD, generator=g).to(dtype)
    return q, k, v, cache, torch.tensor(slots), table, torch.tensor(positions)


CASES = {
    # Three requests decoding at different lengths.
    "decode": (3, 1, [5, 0, 13], [[1, 2], [3], [4, 5, 6, 7]]),
    # One request: 6 new tokens after 5 cached ones (prefix blocks 1, 2).
    "prefill_after_prefix": (1, 6, [5], [[1, 2, 8]]),
}
# (sliding window, soft cap, sinks): scores have a standard deviation of
# ~1, so a cap of 1 changes every one of them.
VARIANTS = [(None, None, False), (3, None, False), (3, 1.0, False), (None, None, True),
            (3, None, True)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("window,soft_cap,with_sinks", VARIANTS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_compiled_step_matches_the_loops(case, window, soft_cap, with_sinks, dtype):
    q, k, v, cache, slots, table, positions = _case(*CASES[case], dtype)
    sinks = SINKS.to(dtype) if with_sinks else None
    want_cache = cache.clone()
    want = pa.reference(q, k, v, want_cache, slots, table, positions, BLOCK, 0.25, window,
                        soft_cap, sinks)

    dev_cache = cache.to("rbln")
    ptr = dev_cache.data_ptr()
    step = torch.compile(_step, backend="rbln", dynamic=False, fullgraph=True)
    before = torch.rbln.counters()
    with torch.no_grad():
        got = step(*[t.to("rbln") for t in (q, k, v)], dev_cache,
                   *[t.to("rbln") for t in (slots, table, positions)], window, soft_cap,
                   None if sinks is None else sinks.to("rbln"))
    after = torch.rbln.counters()
    for name in ("graph/cpu_fallback", "graph/host_ops", "dispatch/cpu_fallback"):
        assert after.get(name, 0) == before.get(name, 0), name
    # One rounding of outputs of magnitude < 4 (2 ulps of 4 at most).
    tol = {torch.float32: 1e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}[dtype]
    torch.testing.assert_close(got.cpu().float(), want, atol=tol, rtol=tol)
    # The program wrote the new tokens into the caller's cache tensor.
    assert dev_cache.data_ptr() == ptr
    assert torch.equal(dev_cache.cpu(), want_cache)


@pytest.mark.parametrize("window,soft_cap,with_sinks", VARIANTS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_cpu_op_and_decomposition_match_the_loops(case, window, soft_cap, with_sinks):
    # Off rbln the op is the ATen decomposition (gather, mask from the
    # positions, SDPA or, with a cap or sinks, the scores' softmax).
    q, k, v, cache, slots, table, positions = _case(*CASES[case], torch.float32)
    sinks = SINKS if with_sinks else None
    want_cache = cache.clone()
    want = pa.reference(q, k, v, want_cache, slots, table, positions, BLOCK, 0.25, window,
                        soft_cap, sinks)
    got = [torch.ops.rbln.paged_attention(q, want_cache, table, positions, BLOCK, 0.25, window,
                                          soft_cap, sinks),
           pa.attend(q, want_cache, table, positions, BLOCK, 0.25, window, soft_cap, sinks)]
    for out in got:
        torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)


def test_padding_rows_only_touch_the_null_block():
    # A decode grid of 4 with one real request: rows 1..3 are padding
    # (slot 0, position 0, block table of zeros).
    q, k, v, cache, slots, table, positions = _case(1, 1, [6], [[2, 3]], torch.float32)
    pad = 3
    q = torch.cat([q, torch.randn(pad, *q.shape[1:])])
    k = torch.cat([k, torch.randn(pad, *k.shape[1:])])
    v = torch.cat([v, torch.randn(pad, *v.shape[1:])])
    slots = torch.cat([slots, torch.zeros(pad, dtype=torch.int64)])
    positions = torch.cat([positions, torch.zeros(pad, dtype=torch.int64)])
    table = torch.cat([table, torch.zeros(pad, table.shape[1], dtype=torch.int64)])
    dev_cache = cache.to("rbln")
    step = torch.compile(_step, backend="rbln", dynamic=False, fullgraph=True)
    with torch.no_grad():
        got = step(*[t.to("rbln") for t in (q, k, v)], dev_cache,
                   *[t.to("rbln") for t in (slots, table, positions)], None, None)
    want_cache = cache.clone()
    want = pa.reference(q[:1], k[:1], v[:1], want_cache, slots[:1], table[:1], positions[:1],
                        BLOCK, 0.25)
    torch.testing.assert_close(got[:1].cpu(), want, atol=1e-5, rtol=1e-5)
    out = dev_cache.cpu()
    assert torch.equal(out[BLOCK:], want_cache[BLOCK:])  # Only block 0 differs.


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
