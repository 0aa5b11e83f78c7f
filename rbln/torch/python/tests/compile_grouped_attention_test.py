"""Grouped-query attention compiled: attention over transformers' repeat_kv'd
keys and values reads them unrepeated (fx_to_ir hands the attention op the
key/value heads with enable_gqa), and sdpa(enable_gqa=True) with fewer
key/value heads (transformers' call without a mask) takes the same path
instead of PyTorch's math decomposition, against PyTorch on the CPU (issue
29)."""
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


def kernel_items():
    return torch.rbln.counters().get("compiler/masked_attention/items", 0)


def gqa_attention(q, k, v, mask=None):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None,
                                          enable_gqa=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("masked", [False, True])
def test_sdpa_enable_gqa_takes_the_attention_kernel(dtype, masked):
    q, k, v, mask = inputs(2, 8, 2, 6, 6 if not masked else 11, dtype, seed=3)
    mask = mask if masked else None
    expected = gqa_attention(q, k, v, mask)
    torch._dynamo.reset()
    f = torch.compile(gqa_attention, backend="rbln", dynamic=False, fullgraph=True)
    before = kernel_items()
    with torch.no_grad():
        got = f(*(t.to(DEV) for t in (q, k, v)), None if mask is None else mask.to(DEV)).cpu()
    # One work item per batch x key/value head: the kernel, not the math
    # decomposition's repeat_interleave and softmax.
    assert kernel_items() - before == 2 * 2
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(got, expected, atol=tol, rtol=tol)


def test_sdpa_enable_gqa_in_a_nested_region_and_with_gradients():
    q, k, v, _ = inputs(1, 8, 2, 5, 5, torch.float32, seed=4)

    @torch.compiler.nested_compile_region
    def layer(q, k, v):
        return gqa_attention(q, k, v) * 2

    def twice(q, k, v):
        return layer(layer(q, k, v), k, v)

    torch._dynamo.reset()
    f = torch.compile(twice, backend="rbln", dynamic=False, fullgraph=True)
    before = kernel_items()
    with torch.no_grad():
        got = f(*(t.to(DEV) for t in (q, k, v))).cpu()
    assert kernel_items() - before == 2 * 2  # two calls of 1 x 2 items
    torch.testing.assert_close(got, twice(q, k, v), atol=1e-5, rtol=1e-5)
    # Training: the math path over k and v repeated, gradients summed back
    # to the key/value heads.
    cpu = [t.clone().requires_grad_() for t in (q, k, v)]
    dev = [t.to(DEV).requires_grad_() for t in (q, k, v)]
    torch._dynamo.reset()
    g = torch.compile(gqa_attention, backend="rbln", dynamic=False)
    gqa_attention(*cpu).square().sum().backward()
    g(*dev).square().sum().backward()
    for a, b in zip(dev, cpu):
        torch.testing.assert_close(a.grad.cpu(), b.grad, atol=1e-4, rtol=1e-4)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
