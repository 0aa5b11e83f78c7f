"""Pre-dispatch checks, their order and switches, compiled-kernel ops."""
# spec: G1, G2, G3, H1, H2, H3, H4, H6, H8

import sys

import pytest
import torch

import rbln_test_util
from rbln_test_util import delta


def test_unaligned_last_dim_falls_back_and_counts_recompiles():
    # spec: H1, H3 -- a 3-element add runs on CPU, every call re-checked.
    x = torch.ones(3, dtype=torch.float16, device="rbln")
    before = torch.rbln.counters()
    for _ in range(3):
        y = x + x
    after = torch.rbln.counters()
    assert torch.equal(y.cpu(), torch.full((3,), 2.0, dtype=torch.float16))
    assert delta(before, after, "dispatch/cpu_fallback_why/add/alignment") == 3
    assert delta(before, after, "dispatch/recompile/add") == 3
    assert delta(before, after, "dispatch/compiled_runs") == 0


def test_warm_cache_hits_call_the_runtime_directly():
    # spec: G2 -- the second identical call hits the C++ warm cache: no
    # compile, no wrapper path; a new shape is a new program.
    x = torch.ones(2, 64, dtype=torch.float16, device="rbln")
    y = torch.ones(2, 64, dtype=torch.float16, device="rbln")
    x * y
    before = torch.rbln.counters()
    for _ in range(5):
        z = x * y
    after = torch.rbln.counters()
    assert delta(before, after, "dispatch/warm_hits") == 5
    assert delta(before, after, "dispatch/warm_misses") == 0
    assert delta(before, after, "compiler/compiles") == 0
    assert delta(before, after, "compiler/cache_hits") == 0
    assert torch.equal(z.cpu(), torch.ones(2, 64, dtype=torch.float16))
    before = torch.rbln.counters()
    torch.ones(4, 64, dtype=torch.float16, device="rbln") * torch.ones(
        4, 64, dtype=torch.float16, device="rbln")
    after = torch.rbln.counters()
    assert delta(before, after, "dispatch/warm_misses") == 1
    assert delta(before, after, "compiler/compiles") == 1


def test_wrapper_path_cases_reuse_the_program_without_recompiling():
    # spec: G3 -- a view input, and the same tensor in both operands when
    # that was the first compile, re-enter the wrapper every call; after
    # `x + y` compiled the profile, `x + x` hits the warm entry.
    x = torch.randn(64, 128).half().to("rbln")
    y = torch.randn(64, 128).half().to("rbln")
    before = torch.rbln.counters()
    for _ in range(3):
        twice = x - x
    after = torch.rbln.counters()
    assert delta(before, after, "dispatch/wrapper_path") == 3
    assert delta(before, after, "dispatch/warm_hits") == 0
    assert delta(before, after, "compiler/compiles") == 1
    assert delta(before, after, "compiler/cache_hits") == 2
    assert torch.equal(twice.cpu(), torch.zeros(64, 128, dtype=torch.float16))

    x * y  # Fills the warm entry of this profile ...
    before = torch.rbln.counters()
    same = x * x  # ... which `x * x` then hits.
    after = torch.rbln.counters()
    assert delta(before, after, "dispatch/warm_hits") == 1
    assert delta(before, after, "dispatch/wrapper_path") == 0
    assert torch.equal(same.cpu(), x.cpu() * x.cpu())

    # A transposed view (128x128, contiguous base): the kernel runs on a
    # materialized copy, every call through the wrapper.
    base = torch.randn(128, 128).half()
    view = base.to("rbln").t()
    other = torch.randn(128, 128).half()
    other_rbln = other.to("rbln")
    before = torch.rbln.counters()
    for _ in range(2):
        got = view + other_rbln
    after = torch.rbln.counters()
    assert delta(before, after, "dispatch/wrapper_path") == 2
    assert delta(before, after, "dispatch/warm_hits") == 0
    assert delta(before, after, "compiler/compiles") <= 1
    assert torch.equal(got.cpu(), base.t() + other)


def test_scalar_first_operand():
    # spec: G1, G3 -- mul_.Scalar's composite calls mul.out(scalar, tensor):
    # commutative ops compile with the scalar swapped into "other"; a
    # non-commutative one runs on the CPU, correctly. (The foreach op is a
    # graph program of its own, torch_rbln/_optim_kernels.py: no eager op.)
    x = torch.randn(2, 64).half()
    buf = x.to("rbln")
    before = torch.rbln.counters()
    torch.ops.aten.mul_.Scalar(buf, 0.5)
    torch._foreach_mul_([buf], 2.0)
    after = torch.rbln.counters()
    assert delta(before, after, "dispatch/compiled_runs") == 1
    assert delta(before, after, "graph/runs") == 1
    assert delta(before, after, "dispatch/cpu_fallback") == 0
    assert delta(before, after, "dispatch/cpu_fallback_why/mul/compile_error") == 0
    assert torch.equal(buf.cpu(), x * 0.5 * 2.0)
    got = torch.ops.aten.sub.Tensor(torch.tensor(3.0), buf)
    assert torch.equal(got.cpu(), torch.ops.aten.sub.Tensor(torch.tensor(3.0), x))


def test_storage_offset_view_falls_back():
    # spec: H6 -- base[1:, :] is contiguous with offset 128: creating it is
    # fine, the op falls back.
    base = torch.ones(128, 128, dtype=torch.float16, device="rbln")
    view = base[1:, :]
    assert view.is_contiguous() and view.storage_offset() == 128
    before = torch.rbln.counters()
    y = view + view
    after = torch.rbln.counters()
    assert delta(before, after, "dispatch/cpu_fallback_why/add/storage_offset") == 1
    assert torch.equal(y.cpu(), torch.full((127, 128), 2.0, dtype=torch.float16))


def test_nan_inf_check_downloads_and_falls_back():
    # spec: H1, H8 -- the NaN/Inf check reads inputs on the host.
    z = torch.ones(64, dtype=torch.float16, device="rbln")
    z = z + z  # device-latest
    y = torch.ones(64, dtype=torch.float16, device="rbln")
    before = torch.rbln.counters()
    w = z * y
    after = torch.rbln.counters()
    assert delta(before, after, "storage/downloads") >= 1  # z came to the host.
    assert delta(before, after, "dispatch/compiled_runs") == 1
    bad = torch.tensor([float("nan")] + [1.0] * 63, dtype=torch.float16, device="rbln")
    before = torch.rbln.counters()
    r = bad * y
    after = torch.rbln.counters()
    assert delta(before, after, "dispatch/cpu_fallback_why/mul/nan_inf") == 1
    assert torch.isnan(r.cpu()[0]) and r.cpu()[1].item() == 1.0
    assert torch.equal(w.cpu(), torch.full((64,), 2.0, dtype=torch.float16))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_nan_inf_check_finds_every_non_finite_on_warm_hits(dtype):
    # spec: H1, H8 -- warm-cache hits check every element: NaN (any sign or
    # payload) and +-inf anywhere in either operand, the last element
    # included, send the call to the CPU; finite extremes do not.
    bits = torch.int16
    inf = torch.tensor(float("inf"), dtype=dtype).view(bits).item()
    patterns = [inf, inf | -0x8000, inf | 1, -1, inf | 0x40]  # +inf, -inf, NaNs
    ones = torch.ones(128, 128, dtype=dtype)
    y = ones.to("rbln")
    ones.to("rbln") + y  # the warm entry
    for position in (0, 77, 8191, 16383):
        for pattern in patterns:
            for operand in (0, 1):
                bad = ones.clone()
                bad.view(-1).view(bits)[position] = pattern
                b = bad.to("rbln")
                before = torch.rbln.counters()
                r = b + y if operand == 0 else y + b
                after = torch.rbln.counters()
                what = (position, pattern, operand)
                # Found on the warm path: neither a hit nor a miss.
                assert delta(before, after, "dispatch/warm_misses") == 0, what
                assert delta(before, after, "dispatch/warm_hits") == 0, what
                assert delta(before, after, "dispatch/cpu_fallback_why/add/nan_inf") == 1, what
                want = bad + ones
                assert torch.equal(r.cpu().isnan(), want.isnan()), what
                assert torch.equal(r.cpu().nan_to_num(), want.nan_to_num()), what
    info = torch.finfo(dtype)
    big = torch.full((128, 128), info.max, dtype=dtype)
    big.view(-1)[5] = -info.max
    big.view(-1)[6] = info.tiny / 4  # subnormal
    before = torch.rbln.counters()
    big.to("rbln") + y
    after = torch.rbln.counters()
    assert delta(before, after, "dispatch/cpu_fallback_why/add/nan_inf") == 0
    assert delta(before, after, "dispatch/warm_hits") == 1


def test_nan_inf_check_reads_device_latest_results():
    # spec: H1, H8 -- NaN and +-inf made on the device (0/0, +-1/0) are found
    # in the device-latest result: one download, then the CPU runs the op.
    n, d = torch.ones(128, 128, dtype=torch.float16), torch.ones(128, 128, dtype=torch.float16)
    y = d.to("rbln")
    (n.to("rbln") / y) + y  # div and add warm
    (n.to("rbln") / y) + y
    for position, numerator in ((3, 0.0), (16383, 1.0), (9000, -1.0)):
        num, den = n.clone(), d.clone()
        num.view(-1)[position], den.view(-1)[position] = numerator, 0.0
        q = num.to("rbln") / den.to("rbln")  # computed on the device
        before = torch.rbln.counters()
        r = q + y
        after = torch.rbln.counters()
        assert delta(before, after, "dispatch/warm_misses") == 0, position
        assert delta(before, after, "storage/downloads") >= 1, position
        assert delta(before, after, "dispatch/cpu_fallback_why/add/nan_inf") == 1, position
        want = num / den + d
        assert torch.equal(r.cpu().isnan(), want.isnan())
        assert torch.equal(r.cpu().nan_to_num(), want.nan_to_num())


def test_deploy_skips_checks_and_downloads():
    # spec: H2, H8 -- with TORCH_RBLN_DEPLOY=ON: no check, no D2H for z * y,
    # and a NaN input runs on the device.
    r = rbln_test_util.run_python(
        "import torch\n"
        "c = torch.rbln.counters\n"
        "z = torch.ones(64, dtype=torch.float16, device='rbln'); z = z + z\n"
        "y = torch.ones(64, dtype=torch.float16, device='rbln')\n"
        "b = c(); w = z * y; a = c()\n"
        "nan = torch.full((64,), float('nan'), dtype=torch.float16, device='rbln') * y\n"
        "print(a.get('storage/downloads', 0) - b.get('storage/downloads', 0),"
        " a['dispatch/compiled_runs'] - b['dispatch/compiled_runs'], bool(torch.isnan(nan.cpu()).all()),"
        " c().get('dispatch/cpu_fallback_why/mul/nan_inf', 0))\n",
        {"TORCH_RBLN_DEPLOY": "ON"},
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "0 1 True 0"


def test_disable_individual_checks():
    # spec: H2 -- TORCH_RBLN_DEV_DISABLE_OP_CPU_FALLBACK=alignment lets a
    # 3-element add compile; a bad name is a clear error.
    r = rbln_test_util.run_python(
        "import torch\n"
        "x = torch.ones(3, dtype=torch.float16, device='rbln'); y = x + x\n"
        "print(y.cpu().tolist(), torch.rbln.counters().get('dispatch/compiled_runs', 0))\n",
        {"TORCH_RBLN_DEV_DISABLE_OP_CPU_FALLBACK": "alignment"},
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[2.0, 2.0, 2.0] 1"
    bad = rbln_test_util.run_python(
        "import torch\nx = torch.ones(64, dtype=torch.float16, device='rbln'); x + x\n",
        {"TORCH_RBLN_DEV_DISABLE_OP_CPU_FALLBACK": "alignment,typo"},
    )
    assert bad.returncode != 0
    assert "TORCH_RBLN_DEV_DISABLE_OP_CPU_FALLBACK has invalid value 'alignment,typo'" in bad.stderr


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_compiled_ops_match_cpu(dtype):
    # spec: G1 -- a few compiled-kernel ops (out=, in-place too) against CPU.
    torch.manual_seed(0)
    a = torch.randn(4, 64).to(dtype)
    b = (torch.randn(4, 64).abs() + 0.5).to(dtype)
    x, y = a.to("rbln"), b.to("rbln")
    cases = {
        "sub": (lambda p, q: p - q),
        "mul": (lambda p, q: p * q),
        "div": (lambda p, q: p / q),
        "maximum": torch.maximum,
        "gt": (lambda p, q: p > q),
        "relu": (lambda p, q: torch.relu(p)),
        "neg": (lambda p, q: -p),
        "abs": (lambda p, q: p.abs()),
        "where": (lambda p, q: torch.where(p > 0, p, q)),
    }
    before = torch.rbln.counters()
    for name, fn in cases.items():
        got = fn(x, y).cpu()
        torch.testing.assert_close(got, fn(a, b), msg=name)
    out = torch.empty(4, 64, dtype=dtype, device="rbln")
    torch.mul(x, y, out=out)
    x.mul_(2)
    after = torch.rbln.counters()
    torch.testing.assert_close(out.cpu(), a * b)
    torch.testing.assert_close(x.cpu(), a * 2)
    # One run per case, plus `p > 0` inside "where", plus out= and in-place.
    assert delta(before, after, "dispatch/compiled_runs") == len(cases) + 1 + 2


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_reductions_softmax_and_matmul_compile(dtype):
    # spec: G1 -- f32 accumulation for half types, within fp16 tolerance.
    torch.manual_seed(1)
    a = torch.randn(2, 64, 64).to(dtype)
    b = torch.randn(64, 128).to(dtype)
    x, w = a.to("rbln"), b.to("rbln")
    cases = {
        "softmax": (lambda p, q: torch.softmax(p, dim=-1)),
        "log_softmax": (lambda p, q: torch.log_softmax(p, dim=-1)),
        "sum": (lambda p, q: p.sum(dim=(0, 1))),
        "mean": (lambda p, q: p.mean(dim=1, keepdim=True)),
        "amax": (lambda p, q: p.amax(dim=0)),
        "mm": (lambda p, q: p[0] @ q),
        "bmm": (lambda p, q: torch.bmm(p, p.transpose(1, 2).contiguous())),
    }
    before = torch.rbln.counters()
    for name, fn in cases.items():
        got = fn(x, w).cpu()
        want = fn(a.float(), b.float()).to(dtype)
        torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2, msg=name)
    after = torch.rbln.counters()
    assert delta(before, after, "dispatch/compiled_runs") >= len(cases)
    assert delta(before, after, "dispatch/cpu_fallback_why/softmax/compile_error") == 0


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))


# One attention call that fails every pre-dispatch check: float32 (dtype), a
# 0-dim device mask (scalar), a NaN in the query (NaN/Inf), head dim 32
# (alignment, H3), query length 5 (attention, H4) and a query at storage
# offset 32 (H6). The child prints which checks fired, as counter deltas.
_H1_SEQUENCE_CALL = (
    "import torch, torch.nn.functional as F\n"
    "base = torch.randn(1, 6, 32)\n"
    "base[0, 2, 3] = float('nan')\n"
    "k, v = torch.randn(1, 7, 32), torch.randn(1, 7, 32)\n"
    "mask = torch.tensor(0.5)\n"
    "want = F.scaled_dot_product_attention(base[:, 1:], k, v, attn_mask=mask)\n"
    "dq = base.to('rbln')[:, 1:]\n"
    "assert dq.is_contiguous() and dq.storage_offset() == 32\n"
    "before = torch.rbln.counters()\n"
    "got = F.scaled_dot_product_attention(dq, k.to('rbln'), v.to('rbln'),"
    " attn_mask=mask.to('rbln'))\n"
    "after = torch.rbln.counters()\n"
    "torch.testing.assert_close(got.cpu(), want, equal_nan=True)\n"
    "prefix = 'dispatch/cpu_fallback_why/'\n"
    "fired = sorted(k[len(prefix):].split('/', 1)[1] for k in after"
    " if k.startswith(prefix) and after[k] != before.get(k, 0))\n"
    "print(fired, after.get('dispatch/compiled_runs', 0) - before.get('dispatch/compiled_runs', 0))\n"
)


def test_checks_fire_in_the_spec_order():
    # spec: H1, H2, H3, H4, H6 -- disabling the checks one by one in the
    # spec's order (dtype, scalar, NaN/Inf, alignment, attention length,
    # storage offset) makes the next one fire; every result equals the CPU's.
    order = ["dtype", "scalar", "nan_inf", "alignment", "attention", "storage_offset"]
    reasons = dict(zip(order, order))
    reasons["attention"] = "query sequence length 5 not aligned to 32"
    for i, check in enumerate(order):
        disabled = ",".join(order[:i])
        r = rbln_test_util.run_python(
            _H1_SEQUENCE_CALL, {"TORCH_RBLN_DEV_DISABLE_OP_CPU_FALLBACK": disabled or None}
        )
        assert r.returncode == 0, (disabled, r.stderr)
        assert r.stdout.strip() == f"[{reasons[check]!r}] 0", (disabled, r.stdout)
    # With every check off the call compiles as it is (its compile may still
    # fall back, but no check decides it).
    r = rbln_test_util.run_python(
        _H1_SEQUENCE_CALL, {"TORCH_RBLN_DEV_DISABLE_OP_CPU_FALLBACK": "all"}
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().split("] ")[0] in ("[", "['compile_error'"), r.stdout
