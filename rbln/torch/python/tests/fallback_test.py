"""Fallback logging and TORCH_RBLN_DISABLE_FALLBACK categories."""
# spec: H1, H3, H6, I3, I4, I6

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


# Wrapper-check fallbacks, each compared against CPU: a 3-element add
# (alignment, H3) and a contiguous view at offset 64 (storage offset, H6),
# each called twice from a function.
WRAPPER_CHECKS = (
    "import torch\n"
    "a = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float16)\n"
    "base = torch.arange(128, dtype=torch.float16).reshape(2, 64)\n"
    "def add(t):\n"
    "    return t + t\n"
    "for _ in range(2):\n"
    "    y = add(a.to('rbln'))\n"
    "    print(torch.equal(y.cpu(), a + a))\n"
    "    v = base.to('rbln')[1:]\n"
    "    assert v.is_contiguous() and v.storage_offset() == 64\n"
    "    y = add(v)\n"
    "    print(torch.equal(y.cpu(), base[1:] + base[1:]))\n"
)


def test_wrapper_check_fallbacks_are_logged_with_op_reason_and_location():
    # spec: H1, H3, H6, I4 -- like an op without a kernel, on every call.
    r = rbln_test_util.run_python(WRAPPER_CHECKS, {"TORCH_RBLN_LOG_LEVEL": "INFO"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True"] * 4, r.stdout
    lines = [l for l in r.stderr.splitlines() if l.startswith("[TORCH-RBLN]")]
    alignment = (
        "[TORCH-RBLN][INFO] `aten::add` op ran on CPU instead of RBLN "
        "(alignment: a last dimension is not a multiple of 64) (at <string>:5(add) <- <string>:7(<module>))"
    )
    offset = (
        "[TORCH-RBLN][INFO] `aten::add` op ran on CPU instead of RBLN "
        "(storage_offset: an input view does not start at offset 0) (at <string>:5(add) <- <string>:11(<module>))"
    )
    assert lines == [alignment, offset, alignment, offset], r.stderr


def test_wrapper_check_fallbacks_are_quiet_at_the_default_level():
    # spec: I4
    r = rbln_test_util.run_python(WRAPPER_CHECKS)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True"] * 4, r.stdout
    assert "TORCH-RBLN" not in r.stderr
    quiet = rbln_test_util.run_python(SIN)
    assert quiet.returncode == 0 and "TORCH-RBLN" not in quiet.stderr


def test_shim_check_fallbacks_are_not_logged():
    # spec: H1, I4 -- dtype (float32), scalar (0-dim rbln tensor) and NaN/Inf
    # fallbacks show only in explain(), even at INFO; the results match CPU.
    r = rbln_test_util.run_python(
        "import torch\n"
        "f = torch.linspace(0, 1, 64)\n"
        "h = torch.ones(64, dtype=torch.float16)\n"
        "n = h.clone(); n[3] = float('nan')\n"
        "s = torch.tensor(2.0, dtype=torch.float16)\n"
        "with torch.rbln.explain() as e:\n"
        "    ys = [f.to('rbln') * 2, n.to('rbln') + h.to('rbln'), h.to('rbln') * s.to('rbln')]\n"
        "print([torch.allclose(y.cpu(), c, equal_nan=True) for y, c in zip(ys, [f * 2, n + h, h * s])])\n"
        "print(sorted(e.to_dict()['signals']['dispatch/cpu_fallback']['why']))\n",
        {"TORCH_RBLN_LOG_LEVEL": "INFO"},
    )
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    assert out[0] == "[True, True, True]", r.stdout
    assert out[1] == "['aten::add.Tensor: nan_inf', 'aten::mul.Tensor: dtype', 'aten::mul.Tensor: scalar']", r.stdout
    assert "TORCH-RBLN" not in r.stderr


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


# A tensor copied into its own transpose: the two views overlap, which the
# device's strided-copy engine cannot do (SPEC I6's strided_copy_error).
OVERLAP = (
    "import torch\n"
    "x = torch.arange(16, dtype=torch.float16).reshape(4, 4).to('rbln')\n"
    "orig = x.cpu()\n"
    "try:\n"
    "    x.t().copy_(x)\n"
    "    print('copied', torch.equal(x.cpu(), orig.t()))\n"
    "except RuntimeError as e:\n"
    "    print('error', torch.equal(x.cpu(), orig))\n"
    "    print(e)\n"
)


def test_strided_copy_error_falls_back_by_default_and_raises_when_disabled():
    # spec: I6, K3 -- by default the copy bounces through the host (correct
    # result, the K3 warning); with the category disabled it raises, naming
    # the copy, why the engine could not do it and how to allow it, and the
    # tensor keeps its data.
    for env in ({}, {"TORCH_RBLN_DISABLE_FALLBACK": "compile_error,unsupported_op"}):
        r = rbln_test_util.run_python(OVERLAP, env)
        assert r.returncode == 0, r.stderr
        assert r.stdout.splitlines() == ["copied True"], r.stdout
        assert "went through host memory (device->host->device)" in r.stderr
    for value in ("strided_copy_error", "all", "unsupported_op, strided_copy_error"):
        r = rbln_test_util.run_python(OVERLAP, {"TORCH_RBLN_DISABLE_FALLBACK": value})
        assert r.returncode == 0, r.stderr
        out = r.stdout.splitlines()
        assert out[0] == "error True", r.stdout
        message = "\n".join(out[1:])
        assert message.startswith(
            "rbln: `aten::copy_` would go through host memory (strided_copy_error: copying a Half "
            "tensor of shape [4, 4] and strides [4, 1] into a Half tensor of shape [4, 4] and "
            "strides [1, 4] on rbln:0: the device's strided-copy engine cannot do it: the "
            "source's bytes [0x"
        ), message
        assert "overlap (views of one storage), and the strided-copy engine copies between disjoint ranges only" in message
        assert "copy from src.clone() to keep it on the device) but TORCH_RBLN_DISABLE_FALLBACK forbids the " in message
        assert "strided_copy_error fallback; remove 'strided_copy_error' from TORCH_RBLN_DISABLE_FALLBACK to allow it" in message
        assert "went through host memory" not in r.stderr
    # Strided copies the engine can do never reach the category.
    r = rbln_test_util.run_python(
        "import torch\n"
        "x = torch.arange(16, dtype=torch.float16).reshape(4, 4).to('rbln')\n"
        "y = torch.empty(4, 4, dtype=torch.float16, device='rbln')\n"
        "y.t().copy_(x)\n"
        "print(torch.equal(y.cpu(), x.cpu().t()))\n",
        {"TORCH_RBLN_DISABLE_FALLBACK": "strided_copy_error"},
    )
    assert r.returncode == 0 and r.stdout.strip() == "True", r.stderr


def test_bad_values_name_the_variable():
    r = rbln_test_util.run_python(SIN, {"TORCH_RBLN_DISABLE_FALLBACK": "unsupported"})
    assert r.returncode != 0 and "TORCH_RBLN_DISABLE_FALLBACK has invalid value 'unsupported'" in r.stderr
    r = rbln_test_util.run_python(SIN, {"TORCH_RBLN_LOG_LEVEL": "LOUD"})
    assert r.returncode != 0 and "TORCH_RBLN_LOG_LEVEL has invalid value 'LOUD'" in r.stderr


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
