"""Eager ops of issue 5 beyond the element-wise set: scaled_dot_product_attention
on the device through PyTorch's overrideable sdpa backend (with H4's
query-length check), argmax/argmin/max.dim/min.dim and arange with int64
results, and the ops pinned to the CPU with a fast host path (I5)."""
# spec: G1, G2, H4, H5, I5, I6

import sys

import pytest
import torch
import torch.nn.functional as F

import rbln_test_util


def delta(fn):
    """(fn's result, {counter: change}) over the call."""
    before = torch.rbln.counters()
    result = fn()
    after = torch.rbln.counters()
    return result, {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}


def attention_inputs(dtype, L=64, S=64, E=64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(2, 2, n, E, generator=gen).to(dtype) for n in (L, S, S)]


def tol(dtype):
    return {"atol": 2e-2, "rtol": 2e-2} if dtype == torch.float16 else {"atol": 6e-2, "rtol": 6e-2}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("is_causal", [False, True])
def test_sdpa_runs_whole_on_the_device(dtype, is_causal):
    # spec: G1, H4 -- one compiled program, not a decomposition into ops.
    q, k, v = attention_inputs(dtype)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
    qr, kr, vr = (t.to("rbln") for t in (q, k, v))
    got, d = delta(lambda: F.scaled_dot_product_attention(qr, kr, vr, is_causal=is_causal))
    torch.testing.assert_close(got.cpu(), expected, **tol(dtype))
    assert d.get("dispatch/compiled_runs") == 1, d
    assert "dispatch/cpu_fallback" not in d, d
    # Contiguous inputs: the second call hits the warm cache.
    again, d = delta(lambda: F.scaled_dot_product_attention(qr, kr, vr, is_causal=is_causal))
    assert d.get("dispatch/warm_hits") == 1 and "compiler/compiles" not in d, d
    assert torch.equal(again.cpu(), got.cpu())


@pytest.mark.parametrize("mask_dtype", [torch.bool, torch.float16])
def test_sdpa_with_attention_mask(mask_dtype):
    # spec: H4
    q, k, v = attention_inputs(torch.float16, L=64, S=128)
    gen = torch.Generator().manual_seed(1)
    keep = torch.rand(64, 128, generator=gen) > 0.3
    mask = keep if mask_dtype == torch.bool else torch.where(keep, 0.0, -1e4).half()
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    got, d = delta(lambda: F.scaled_dot_product_attention(
        q.to("rbln"), k.to("rbln"), v.to("rbln"), attn_mask=mask.to("rbln")))
    torch.testing.assert_close(got.cpu(), expected, **tol(torch.float16))
    assert d.get("dispatch/compiled_runs", 0) >= 1, d
    assert "dispatch/cpu_fallback/aten::_scaled_dot_product_fused_attention_overrideable" not in d, d


@pytest.mark.parametrize("L", [17, 1])
def test_sdpa_query_length_not_multiple_of_32_runs_on_cpu(L):
    # spec: H4 -- 1 is eager generation's single-token decode step.
    q, k, v = attention_inputs(torch.float16, L=L, S=64)
    expected = F.scaled_dot_product_attention(q, k, v)
    qr, kr, vr = (t.to("rbln") for t in (q, k, v))
    with torch.rbln.explain() as region:
        got = F.scaled_dot_product_attention(qr, kr, vr)
    torch.testing.assert_close(got.cpu(), expected, **tol(torch.float16))
    assert got.device.type == "rbln"
    signals = region.to_dict()["signals"]
    why = f"sdpa_overrideable: query sequence length {L} not aligned to 32"
    # A wrapper-side check: repeated dispatch/recompile, not cpu_fallback (H1).
    assert signals["dispatch/recompile"]["why"] == {why: 1}, region.report()
    assert "dispatch/cpu_fallback" not in signals, region.report()


def test_sdpa_misaligned_query_message_at_info():
    # spec: H4 -- the exact message, in the fallback log.
    code = (
        "import torch, torch.nn.functional as F\n"
        "q = torch.randn(1, 2, 17, 64, dtype=torch.float16, device='rbln')\n"
        "k = torch.randn(1, 2, 64, 64, dtype=torch.float16, device='rbln')\n"
        "out = F.scaled_dot_product_attention(q, k, k)\n"
        "print(tuple(out.shape))\n"
    )
    r = rbln_test_util.run_python(code, {"TORCH_RBLN_LOG_LEVEL": "INFO"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "(1, 2, 17, 64)"
    assert ("[TORCH-RBLN][INFO] sdpa_overrideable (query sequence length 17 not aligned "
            "to 32) op ran on CPU (at <string>:4(<module>))") in r.stderr
    # TORCH_RBLN_DEV_DISABLE_OP_CPU_FALLBACK=attention skips the check (H2).
    r = rbln_test_util.run_python(
        code + "print(torch.rbln.counters().get('dispatch/compiled_runs', 0) > 0)\n",
        {"TORCH_RBLN_LOG_LEVEL": "INFO", "TORCH_RBLN_DEV_DISABLE_OP_CPU_FALLBACK": "attention"})
    assert r.returncode == 0, r.stderr
    assert "sdpa_overrideable" not in r.stderr and r.stdout.split()[-1] == "True", r.stdout


def test_sdpa_training_uses_math_path_with_correct_gradients():
    # spec: H4 -- the overrideable kernel has no backward; a call that needs
    # gradients takes PyTorch's math decomposition (compiled matmul/softmax
    # ops), so training works and matches the CPU.
    q, k, v = attention_inputs(torch.float16)
    ref = [t.float().requires_grad_() for t in (q, k, v)]
    F.scaled_dot_product_attention(*ref, is_causal=True).square().sum().backward()
    dev = [t.to("rbln").requires_grad_() for t in (q, k, v)]
    out, d = delta(lambda: F.scaled_dot_product_attention(*dev, is_causal=True))
    assert "dispatch/cpu_fallback/aten::_scaled_dot_product_fused_attention_overrideable" not in d
    out.float().square().sum().backward()
    for name, a, b in zip("qkv", dev, ref):
        assert a.grad.device.type == "rbln"
        torch.testing.assert_close(a.grad.cpu().float(), b.grad, atol=0.15, rtol=5e-2,
                                   msg=f"grad of {name}")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_index_reductions_compiled_with_int64_results(dtype):
    # spec: G1 -- integer results of argmax/argmin/max.dim/min.dim.
    x = torch.randn(64, 128, generator=torch.Generator().manual_seed(2)).to(dtype)
    xr = x.to("rbln")
    cases = {
        "argmax": lambda t: t.argmax(dim=0),
        "argmin": lambda t: t.argmin(dim=0, keepdim=True),
        "max.dim": lambda t: t.max(dim=0),
        "min.dim": lambda t: t.min(dim=0),
    }
    for name, fn in cases.items():
        got, d = delta(lambda: fn(xr))
        expected = fn(x)
        if isinstance(expected, tuple):
            assert got.indices.dtype == torch.int64
            assert torch.equal(got.values.cpu(), expected.values), name
            assert torch.equal(got.indices.cpu(), expected.indices), name
        else:
            assert got.dtype == torch.int64 and torch.equal(got.cpu(), expected), name
        assert d.get("dispatch/compiled_runs") == 1 and "dispatch/cpu_fallback" not in d, (name, d)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int64], ids=str)
def test_arange_compiled(dtype):
    # spec: G1, G2
    got, d = delta(lambda: torch.arange(3, 3 + 2 * 128, 2, dtype=dtype, device="rbln"))
    assert torch.equal(got.cpu(), torch.arange(3, 3 + 2 * 128, 2, dtype=dtype))
    assert d.get("dispatch/compiled_runs") == 1 and "dispatch/cpu_fallback" not in d, d
    _, d = delta(lambda: torch.arange(3, 3 + 2 * 128, 2, dtype=dtype, device="rbln"))
    assert d.get("dispatch/warm_hits") == 1, d
    # The bounds are part of the key: other bounds compile a new program.
    other, d = delta(lambda: torch.arange(64, dtype=dtype, device="rbln"))
    assert torch.equal(other.cpu(), torch.arange(64, dtype=dtype))
    assert d.get("dispatch/warm_misses") == 1, d


def test_pinned_ops_take_the_fast_host_path():
    # spec: I5 -- counted as dispatch/host_path, not the boxed fallback; in
    # explain() they are host work but not optimization candidates.
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(4, 128, generator=gen).half()
    w = torch.randn(128, generator=gen).half()
    a, b, c = (torch.randn(64, 64, generator=gen) for _ in range(3))
    with torch.rbln.explain() as region:
        ln, d = delta(lambda: F.layer_norm(x.to("rbln"), (128,), w.to("rbln"), w.to("rbln")))
        ar = a.to("rbln")
        ret = ar.addcmul_(b.to("rbln"), c.to("rbln"), value=0.5)
        tri = torch.tril(a.to("rbln"))
    torch.testing.assert_close(ln.cpu(), F.layer_norm(x.float(), (128,), w.float(), w.float()).half(),
                               atol=1e-2, rtol=1e-2)
    assert d.get("dispatch/host_path/aten::native_layer_norm") == 1, d
    assert "dispatch/cpu_fallback/aten::native_layer_norm" not in d, d
    assert ret is ar and torch.allclose(ar.cpu(), a.addcmul(b, c, value=0.5))
    assert torch.equal(tri.cpu(), torch.tril(a)) and tri.device.type == "rbln"
    facts = region.to_dict()
    why = facts["signals"]["dispatch/cpu_fallback"]["why"]
    assert why.get("aten::tril.out: pinned_to_cpu") == 1, why
    assert why.get("aten::addcmul.out: pinned_to_cpu", 0) >= 1, why
    candidates = {c["op"] for c in facts["optimization_candidates"]}
    assert not candidates & {"aten::tril.out", "aten::addcmul.out", "aten::native_layer_norm"}, candidates


def test_pinned_ops_ignore_disable_fallback():
    # spec: I6 -- ops pinned to CPU always run on the host.
    r = rbln_test_util.run_python(
        "import torch\n"
        "x = torch.ones(4, 4, device='rbln')\n"
        "print(torch.tril(x).sum().item())\n",
        {"TORCH_RBLN_DISABLE_FALLBACK": "all"},
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "10.0"


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
