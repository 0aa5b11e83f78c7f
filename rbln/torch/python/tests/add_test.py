"""add through compiler + runtime, compared with PyTorch on CPU."""
# spec: B3, G1, G2, D4, P6

import sys

import pytest
import torch

import rbln_test_util


def counters():
    return torch.rbln.counters()


def test_spec_b3_example():
    # spec: B3
    r = rbln_test_util.run_python(
        "import torch\n"
        "with torch.rbln.device(0):\n"
        "    x = torch.tensor([1, 2], dtype=torch.float16, device='rbln')\n"
        "    y = torch.tensor([3, 4], dtype=torch.float16, device='rbln')\n"
        "    z = x + y\n"
        "assert z.device == torch.device('rbln:0')\n"
        "print(z.cpu())\n"
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "tensor([4., 6.], dtype=torch.float16)"


def test_add_compiles_once_and_runs_jit_code():
    # spec: G2 -- compile counter 0 -> 1 -> 1 for an identical second call.
    r = rbln_test_util.run_python(
        "import torch\n"
        "c = torch.rbln.counters\n"
        "a = torch.randn(8, 64).half(); b = torch.randn(8, 64).half()\n"
        "x, y = a.to('rbln'), b.to('rbln')\n"
        "print(c().get('compiler/compiles', 0))\n"
        "z1 = x + y\n"
        "print(c()['compiler/compiles'], c()['runtime/executions'])\n"
        "z2 = x + y\n"
        "print(c()['compiler/compiles'], c()['runtime/executions'], c()['dispatch/warm_hits'])\n"
        "assert torch.equal(z1.cpu(), a + b) and torch.equal(z2.cpu(), a + b)\n"
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0", "1", "1", "1", "2", "1"]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize(
    "shapes", [((64,), (64,)), ((4, 3, 64), (4, 3, 64)), ((5, 64), (64,)), ((2, 1, 64), (3, 64))]
)
def test_add_matches_cpu(dtype, shapes):
    torch.manual_seed(0)
    a = (torch.randn(shapes[0]) * 100).to(dtype)
    b = torch.randn(shapes[1]).to(dtype)
    before = counters()["dispatch/compiled_runs"] if "dispatch/compiled_runs" in counters() else 0
    got = (a.to("rbln") + b.to("rbln")).cpu()
    assert counters()["dispatch/compiled_runs"] == before + 1
    torch.testing.assert_close(got, a + b, rtol=0, atol=0)


def test_alpha_is_part_of_the_key():
    a = torch.randn(64).half()
    b = torch.randn(64).half()
    x, y = a.to("rbln"), b.to("rbln")
    torch.testing.assert_close(torch.add(x, y, alpha=2).cpu(), torch.add(a, b, alpha=2))
    torch.testing.assert_close(torch.add(x, y, alpha=3).cpu(), torch.add(a, b, alpha=3))


def test_out_and_inplace_variants():
    a = torch.randn(4, 64).half()
    b = torch.randn(4, 64).half()
    x, y = a.to("rbln"), b.to("rbln")
    out = torch.empty(4, 64, dtype=torch.float16, device="rbln")
    before = counters()["dispatch/compiled_runs"]
    torch.add(x, y, out=out)
    x.add_(y)
    assert counters()["dispatch/compiled_runs"] == before + 2
    torch.testing.assert_close(out.cpu(), a + b, rtol=0, atol=0)
    torch.testing.assert_close(x.cpu(), a + b, rtol=0, atol=0)


def test_non_contiguous_input():
    a = torch.randn(64, 64).half()
    b = torch.randn(64, 64).half()
    got = (a.to("rbln").t() + b.to("rbln")).cpu()
    torch.testing.assert_close(got, a.t() + b, rtol=0, atol=0)


def test_float32_falls_back_and_python_scalars_compile():
    # spec: D4, G2, G3, G4 -- float32 arithmetic does not use the NPU
    # kernels; a Python scalar operand is part of the key (one program per
    # value) and takes the wrapper path every call, without recompiling.
    a = torch.randn(64)
    before = counters()
    got = (a.to("rbln") + a.to("rbln")).cpu()
    after = counters()
    torch.testing.assert_close(got, a + a)
    assert after.get("dispatch/compiled_runs", 0) == before.get("dispatch/compiled_runs", 0)
    assert after["dispatch/cpu_fallback_why/add/dtype"] > before.get("dispatch/cpu_fallback_why/add/dtype", 0)
    x = torch.ones(64, dtype=torch.float16, device="rbln")
    before = counters()
    one, two, one_again = x + 1.0, x + 2.0, x + 1.0
    after = counters()
    def delta(key):
        return after.get(key, 0) - before.get(key, 0)

    assert delta("dispatch/compiled_runs") == 3
    assert delta("dispatch/warm_hits") == 0
    assert delta("dispatch/wrapper_path") == 3
    assert delta("compiler/compiles") == 2  # 1.0 and 2.0; the second 1.0 reuses
    assert torch.equal(one.cpu(), torch.full((64,), 2.0, dtype=torch.float16))
    assert torch.equal(two.cpu(), torch.full((64,), 3.0, dtype=torch.float16))


def test_other_ops_use_the_cpu_fallback():
    a = torch.randn(3, 64).half()
    before = counters()
    got = torch.sin(a.to("rbln")).cpu()
    after = counters()
    torch.testing.assert_close(got, torch.sin(a))
    assert after["dispatch/cpu_fallback"] > before["dispatch/cpu_fallback"]
    sin = [k for k in after if k.startswith("dispatch/cpu_fallback/aten::sin")]
    assert sin and any(after[k] > before.get(k, 0) for k in sin)


def test_autograd_through_add_and_fallback():
    a = torch.randn(4, 64, requires_grad=True)
    x = a.detach().to("rbln").requires_grad_()
    y = (x * 3 + x).sum()
    y.backward()
    assert x.grad.device.type == "rbln"
    torch.testing.assert_close(x.grad.cpu(), torch.full((4, 64), 4.0))


def test_mismatched_devices_raise():
    r = rbln_test_util.run_python(
        "import torch\n"
        "x = torch.ones(64, dtype=torch.float16, device='rbln:0')\n"
        "y = torch.ones(64, dtype=torch.float16, device='rbln:1')\n"
        "try:\n"
        "    x + y\n"
        "except RuntimeError as e:\n"
        "    print('error:', e)\n",
        {"RBLN_SIM_NPUS": "2"},
    )
    assert r.returncode == 0, r.stderr
    assert "error: Expected all tensors to be on the same device" in r.stdout
    assert "rbln:0 and rbln:1" in r.stdout


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))


def test_compiled_kernel_dtype_table_decides_what_compiles():
    # spec: G1, H1 -- one dtype table (device_dtypes.h): the dtypes
    # get_amp_supported_dtype() names are exactly the ones whose add runs as
    # a compiled kernel; the others fall back with why: dtype.
    table = torch.rbln.get_amp_supported_dtype()
    assert table == [torch.float16, torch.bfloat16]
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int32):
        a = (torch.randn(4, 64) * 8).to(dtype)
        before = counters()
        got = (a.to("rbln") + a.to("rbln")).cpu()
        after = counters()
        torch.testing.assert_close(got, a + a)
        runs = after.get("dispatch/compiled_runs", 0) - before.get("dispatch/compiled_runs", 0)
        dtype_fallbacks = after.get("dispatch/cpu_fallback_why/add/dtype", 0) - before.get(
            "dispatch/cpu_fallback_why/add/dtype", 0
        )
        assert (runs, dtype_fallbacks) == ((1, 0) if dtype in table else (0, 1)), dtype
