"""Grouped-query attention compiled: attention over transformers' repeat_kv'd
keys and values reads them unrepeated (fx_to_ir hands the attention op the
key/value heads with enable_gqa), against PyTorch on the CPU (issue 29)."""
# spec: J1, J6, H4

import sys

import pytest
import torch
import torch._dynamo
from torch.fx.experimental.proxy_tensor import make_fx

import torch_rbln  # noqa: F401
from torch_rbln._dynamo import fx_to_ir, grouped_attention

DEV = "rbln:0"
F = torch.nn.functional


def repeat_kv(x, n_rep):
    """transformers' repeat_kv (Llama, Qwen, Mistral)."""
    b, h, s, e = x.shape
    return x[:, :, None, :, :].expand(b, h, n_rep, s, e).reshape(b, h * n_rep, s, e)


def attention(q, k, v, mask):
    group = q.shape[1] // k.shape[1]
    return F.scaled_dot_product_attention(q, repeat_kv(k, group), repeat_kv(v, group),
                                          attn_mask=mask)


def inputs(batch, heads, kv_heads, length, keys, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, length, 16, generator=g).to(dtype)
    k, v = (torch.randn(batch, kv_heads, keys, 16, generator=g).to(dtype) for _ in range(2))
    # A static cache's mask: each query sees the keys up to its position.
    pos = torch.arange(keys - length, keys).view(length, 1)
    mask = (torch.arange(keys).view(1, keys) <= pos).view(1, 1, length, keys)
    mask = torch.where(mask, 0.0, float("-inf")).to(dtype).expand(batch, 1, length, keys)
    return q, k, v, mask


def test_fx_to_ir_gives_the_attention_the_unrepeated_heads():
    q, k, v, mask = inputs(2, 8, 2, 3, 7, torch.float32)
    gm = make_fx(attention, decomposition_table={})(q, k, v, mask)
    ir = fx_to_ir.fx_to_ir(gm, "gqa")
    shapes = {n: tuple(s) for n, _, s in ir.inputs}
    for _, _, outs, _ in ir.nodes:
        shapes.update({n: tuple(s) for n, _, s in outs})
    (node,) = [n for n in ir.nodes if n[0] == "_scaled_dot_product_flash_attention_for_cpu"]
    op, ins, _, attrs = node
    assert attrs.get("enable_gqa") is True, attrs
    assert [shapes[x] for x in ins[:3]] == [(2, 8, 3, 16), (2, 2, 7, 16), (2, 2, 7, 16)]
    # Only k repeated, or k and v by different groups: left as they are.
    (att,) = [n for n in gm.graph.nodes
              if n.target in grouped_attention.ATTENTION_OPS]
    assert grouped_attention.ungrouped_kv(att) is not None
    g2 = make_fx(lambda q, k, v, m: F.scaled_dot_product_attention(
        q, repeat_kv(k, 4), v, attn_mask=m))(q, k, v.repeat(1, 4, 1, 1), mask)
    (att2,) = [n for n in g2.graph.nodes if n.target in grouped_attention.ATTENTION_OPS]
    assert grouped_attention.ungrouped_kv(att2) is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("batch,length", [(3, 1), (1, 5)])  # decode, prefill
def test_grouped_attention_compiled_matches_cpu(dtype, batch, length):
    q, k, v, mask = inputs(batch, 8, 2, length, 12, dtype, seed=length)
    expected = attention(q, k, v, mask)
    torch._dynamo.reset()
    f = torch.compile(attention, backend="rbln", dynamic=False, fullgraph=True)
    with torch.no_grad():
        got = f(*(t.to(DEV) for t in (q, k, v, mask))).cpu()
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(got, expected, atol=tol, rtol=tol)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
