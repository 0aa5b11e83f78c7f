"""torch.compile(backend="rbln") in fresh processes: entry-point autoload
and TORCH_RBLN_DISABLE_FALLBACK (read at process start)."""
# spec: J1, J2, J4, J6, G4, I6

import sys

import pytest

import rbln_test_util


def test_backend_autoloads_with_import_torch_only():
    # spec: J1, G4 -- the entry point registers "rbln"; nothing but torch imported.
    r = rbln_test_util.run_python(
        "import torch\n"
        "x = torch.randn(128, 128, dtype=torch.float16)\n"
        "f = torch.compile(lambda a: torch.relu(a + a), backend='rbln', dynamic=False)\n"
        "y = f(x.to('rbln'))\n"
        "print(y.device, torch.equal(y.cpu(), torch.relu(x + x)))\n"
        "print('rbln' in torch._dynamo.list_backends())\n"
        "print(torch._dynamo.config.specialize_float)\n"
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["rbln:0", "True", "True", "True"]


def test_disabled_compile_error_fallback_raises_the_not_implemented_error():
    # spec: J4, J6, I6
    r = rbln_test_util.run_python(
        "import torch\n"
        "f = torch.compile(lambda a: torch.erfinv(a) + 1, backend='rbln', dynamic=False)\n"
        "f(torch.ones(64, 64, dtype=torch.float16, device='rbln'))\n",
        {"TORCH_RBLN_DISABLE_FALLBACK": "compile_error"},
    )
    assert r.returncode != 0
    assert "NotImplementedError: The following operators are not implemented: ['erfinv']" in r.stderr
    assert "remove 'compile_error' from TORCH_RBLN_DISABLE_FALLBACK" in r.stderr


DYNAMIC = (
    "import torch\n"
    "def f(x):\n"
    "    return torch.relu(x * x.shape[0])\n"
    "c = torch.compile(f, backend='rbln', dynamic=True)\n"
    "a = torch.randn(128, 64, dtype=torch.float16)\n"
    "b = torch.randn(96, 64, dtype=torch.float16)\n"
    "print(torch.equal(c(a.to('rbln')).cpu(), f(a)))\n"
    "print(torch.equal(c(b.to('rbln')).cpu(), f(b)))\n"
    "print(torch.rbln.counters()['graph/cpu_fallback'])\n"
)


def test_dynamic_shape_error_raises_when_compile_error_fallback_is_disabled():
    # spec: J2, J4 -- the first shape runs, the second raises the J2 message.
    strict = rbln_test_util.run_python(DYNAMIC, {"TORCH_RBLN_DISABLE_FALLBACK": "compile_error"})
    assert strict.stdout.split() == ["True"]
    assert strict.returncode != 0
    assert "RuntimeError: Dynamic shape not supported for rbln backend" in strict.stderr


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
