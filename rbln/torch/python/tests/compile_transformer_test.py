"""A GPT-2-style transformer block compiled with torch.compile(backend="rbln")
as one program, against PyTorch on the CPU."""
# spec: J1, J3, J6, J7, H5, P9

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
    # SDPA's softmax arrives written out (backend._safe_softmax): amax, exp, sum.
    assert {"embedding", "native_layer_norm", "addmm", "bmm", "gelu", "amax", "exp", "sum"} <= set(ops)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
