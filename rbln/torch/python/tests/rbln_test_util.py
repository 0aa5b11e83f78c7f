"""Helpers for torch_rbln's Python tests."""

import os
import subprocess
import sys

import pytest


def run_python(code: str, env_overrides=None, timeout=120):
    """Runs `code` in a fresh interpreter with this test's sys.path.

    Environment variables of the device profile are read once per process,
    so tests that change them run in a child process.
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    for key, value in (env_overrides or {}).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def delta(before, after, key):
    """How much counter `key` grew between two torch.rbln counter snapshots."""
    return after.get(key, 0) - before.get(key, 0)


def _reset_dynamo():
    import torch._dynamo

    torch._dynamo.reset()


@pytest.fixture
def fresh_dynamo():
    """Dynamo's caches reset around the test, so each test compiles its own
    graphs. A module imports it and names it in
    `pytestmark = pytest.mark.usefixtures("fresh_dynamo")`."""
    _reset_dynamo()
    yield
    _reset_dynamo()


@pytest.fixture
def strict_fresh_dynamo(monkeypatch, fresh_dynamo):
    """fresh_dynamo, and a graph the compiler cannot take fails the test
    (TORCH_RBLN_DISABLE_FALLBACK=compile_error) instead of running on the
    CPU."""
    monkeypatch.setenv("TORCH_RBLN_DISABLE_FALLBACK", "compile_error")
    yield
