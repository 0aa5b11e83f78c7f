"""A GPT-2-style transformer block compiled with torch.compile(backend="rbln")
as one program, against PyTorch on the CPU."""
# spec: J1, J3, J6, J7, H4, H5, P9

import sys

import pytest
import torch
import torch._dynamo

import torch_rbln  # noqa: F401
from torch_rbln import _dynamo as rbln_dynamo
from torch_rbln.testing.gpt2_block import make_block

DEV = "rbln:0"


def compile_or_skip(fn, *args):
    """Runs the compiled fn; skips (listing the ops) while the compiler lacks
    ops of the graph, fails on any other compile failure."""
    torch._dynamo.reset()
    try:
        out = fn(*args)
    except RuntimeError:
        # The CPU fallback cannot run a module whose weights are on rbln (I2).
        if not rbln_dynamo.compile_failures():
            raise
    for graph, error in rbln_dynamo.compile_failures():
        if isinstance(error, NotImplementedError):
            pytest.skip(f"graph {graph}: compiler lacks ops: {error}")
        raise AssertionError(f"graph {graph} failed to compile: {error!r}")
    return out


def test_gpt2_block_float16_matches_cpu():
    # spec: J1, J3, J6, H5 -- the whole block is one program: embedding, layer
    # norm, causal attention (seq 48: not a multiple of 32), GELU MLP; last
    # dims of 48 and 384 are not multiples of 64 either.
    block = make_block(dim=128, heads=2, vocab=256, max_seq=64)
    idx = torch.randint(0, 256, (2, 48), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected16 = block(idx)
        expected32 = make_block(dtype=torch.float32, dim=128, heads=2, vocab=256, max_seq=64)(idx)
    device_block = make_block(dim=128, heads=2, vocab=256, max_seq=64).to(DEV)
    compiled = torch.compile(device_block, backend="rbln", dynamic=False)
    before = torch.rbln.counters()
    with torch.no_grad():
        out = compile_or_skip(compiled, idx.to(DEV))
        again = compiled(idx.to(DEV))
    after = torch.rbln.counters()
    assert out.device == torch.device(DEV) and out.dtype == torch.float16
    got = out.cpu()
    torch.testing.assert_close(got, expected16, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(got.float(), expected32, atol=2e-2, rtol=2e-2)
    assert torch.equal(again.cpu(), got)
    # One program for the whole block, run twice, nothing on the CPU.
    assert after["graph/compiles"] - before.get("graph/compiles", 0) == 1
    assert after["graph/runs"] - before.get("graph/runs", 0) == 2
    assert after["graph/cpu_fallback"] - before.get("graph/cpu_fallback", 0) == 0
    (graph,) = torch.rbln.compiled_programs()
    ops = graph.inspect()["programs"][0]["ops"]
    # Inference attention arrives as one op (the CPU flash op, which the
    # compiler's attention converter lowers), not as bmm + softmax.
    assert {"embedding", "native_layer_norm", "addmm", "gelu",
            "_scaled_dot_product_flash_attention_for_cpu"} <= set(ops)
    assert "bmm" not in ops


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_attention_with_a_padding_row_is_one_op_and_matches_cpu(dtype):
    # A query row the mask hides every key from (left padding) gets zeros as
    # on the CPU, and the other rows stay finite (no NaN through p @ v).
    F = torch.nn.functional
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, n, 16, generator=g).to(dtype) for n in (6, 9, 9))
    mask = torch.rand(2, 1, 6, 9, generator=g) > 0.3
    mask[..., 0] = True
    mask[0, :, 2] = False  # every key hidden from query 2 of batch 0
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch._dynamo.reset()
    f = torch.compile(lambda *t: F.scaled_dot_product_attention(*t[:3], attn_mask=t[3]),
                      backend="rbln")
    with torch.no_grad():
        got = f(*(t.to(DEV) for t in (q, k, v, mask))).cpu()
    assert torch.isfinite(got).all()
    assert torch.equal(got[0, :, 2], torch.zeros_like(got[0, :, 2]))
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(got, expected, atol=tol, rtol=tol)
    ops = [program["ops"] for graph in torch.rbln.compiled_programs()
           for program in graph.inspect()["programs"]]
    assert any("_scaled_dot_product_flash_attention_for_cpu" in o for o in ops), ops


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
