"""Fallback logging and TORCH_RBLN_DISABLE_FALLBACK categories."""
# spec: I3, I4, I6

import sys

import pytest

import rbln_test_util

SIN = (
    "import torch\n"
    "x = torch.ones(64, dtype=torch.float16, device='rbln')\n"
    "def f(t):\n"
    "    return torch.sin(t)\n"
    "y = f(x)\n"
    "print(y.cpu()[0].item())\n"
)


def test_unsupported_op_is_logged_at_info_with_source_location():
    # spec: I4
    r = rbln_test_util.run_python(SIN, {"TORCH_RBLN_LOG_LEVEL": "INFO"})
    assert r.returncode == 0, r.stderr
    assert "[TORCH-RBLN][INFO] `aten::sin` op ran on CPU instead of RBLN (at <string>:4(f) <- <string>:5(<module>))" in r.stderr


def test_checks_are_not_logged_and_default_level_is_quiet():
    # spec: I4 -- pre-dispatch check fallbacks show only in explain().
    r = rbln_test_util.run_python(
        "import torch\nx = torch.ones(3, dtype=torch.float16, device='rbln'); y = x + x\n",
        {"TORCH_RBLN_LOG_LEVEL": "INFO"},
    )
    assert r.returncode == 0, r.stderr
    assert "TORCH-RBLN" not in r.stderr
    quiet = rbln_test_util.run_python(SIN)
    assert quiet.returncode == 0 and "TORCH-RBLN" not in quiet.stderr


def test_disable_unsupported_op_fallback_raises():
    # spec: I6
    r = rbln_test_util.run_python(SIN, {"TORCH_RBLN_DISABLE_FALLBACK": "compile_error,unsupported_op"})
    assert r.returncode != 0
    assert "`aten::sin` would run on CPU (unsupported_op)" in r.stderr
    assert "remove 'unsupported_op' from TORCH_RBLN_DISABLE_FALLBACK" in r.stderr
    # Pre-dispatch checks are not categories: an unaligned add still runs.
    ok = rbln_test_util.run_python(
        "import torch\nx = torch.ones(3, dtype=torch.float16, device='rbln'); print((x + x).cpu().tolist())\n",
        {"TORCH_RBLN_DISABLE_FALLBACK": "all"},
    )
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.strip() == "[2.0, 2.0, 2.0]"


def test_bad_values_name_the_variable():
    r = rbln_test_util.run_python(SIN, {"TORCH_RBLN_DISABLE_FALLBACK": "unsupported"})
    assert r.returncode != 0 and "TORCH_RBLN_DISABLE_FALLBACK has invalid value 'unsupported'" in r.stderr
    r = rbln_test_util.run_python(SIN, {"TORCH_RBLN_LOG_LEVEL": "LOUD"})
    assert r.returncode != 0 and "TORCH_RBLN_LOG_LEVEL has invalid value 'LOUD'" in r.stderr


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
