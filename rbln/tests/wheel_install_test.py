"""End to end: the wheel installs into a fresh venv and `import torch` alone
brings up the rbln device (the torch.backends entry point), then the demo
runs there."""
# spec: B1, B3

import glob
import json
import os
import subprocess
import sys

import pytest

WHEEL_GLOB = "rbln/torch/torch_rbln-*.whl"


@pytest.fixture(scope="module")
def venv_python(tmp_path_factory):
    wheels = glob.glob(WHEEL_GLOB)
    assert len(wheels) == 1, f"expected one wheel in runfiles, found {wheels}"
    venv = tmp_path_factory.mktemp("venv")
    # torch comes from the system site-packages; only the wheel is new.
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    subprocess.run(
        # --ignore-installed: a torch_rbln in the system site-packages must not
        # satisfy the install; the venv's own copy is under test.
        [python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
         "--ignore-installed", wheels[0]],
        check=True,
    )
    return python


def run(python, code, cwd):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    return subprocess.run([python, "-c", code], capture_output=True, text=True, cwd=cwd, env=env, timeout=300)


def test_import_torch_alone(venv_python, tmp_path):
    r = run(
        venv_python,
        "import torch, torch_rbln\n"
        "print(torch_rbln.__file__)\n"
        "with torch.rbln.device(0):\n"
        "    x = torch.tensor([1, 2], dtype=torch.float16, device='rbln')\n"
        "    y = torch.tensor([3, 4], dtype=torch.float16, device='rbln')\n"
        "    z = x + y\n"
        "print(z.device)\n"
        "print(z.cpu())\n",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().split("\n")
    venv_dir = os.path.dirname(os.path.dirname(venv_python))
    assert lines[0].startswith(venv_dir) and "/site-packages/torch_rbln/" in lines[0]
    assert lines[1:] == ["rbln:0", "tensor([4., 6.], dtype=torch.float16)"]


def test_rbln_smi_command(venv_python, tmp_path):
    # The wheel installs an `rbln-smi` command; a live process using the
    # device shows up with its chiplets.
    smi = os.path.join(os.path.dirname(venv_python), "rbln-smi")
    env = dict(os.environ, RBLN_SMI_DIR=str(tmp_path))
    env.pop("PYTHONPATH", None)
    user = subprocess.Popen(
        [venv_python, "-c", "import torch, sys; x = torch.ones(1024, dtype=torch.float16, device='rbln');"
         " y = x + x; print('ready', flush=True); sys.stdin.readline()"],
        env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert user.stdout.readline().strip() == "ready"
        r = subprocess.run([smi, "--json"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
        assert r.returncode == 0, r.stderr
        report = json.loads(r.stdout)
        mine = [p for p in report["processes"] if p["pid"] == user.pid]
        assert len(mine) == 1 and len(mine[0]["chiplets"]) == 4
        assert sum(c["allocated_current"] for c in mine[0]["chiplets"]) == 2 * 4096
    finally:
        user.stdin.write("\n")
        user.stdin.close()
        user.wait(timeout=60)
    assert not os.path.exists(os.path.join(tmp_path, f"rbln-smi.{user.pid}"))


def test_demo_runs(venv_python, tmp_path):
    demo = os.path.join(os.getcwd(), "rbln/tests/demo.py")
    r = subprocess.run([venv_python, demo], capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "tensor([4., 6.], dtype=torch.float16)" in r.stdout
    assert "equals PyTorch CPU: True" in r.stdout
    # The transformers Llama model: eager and compiled outputs, explain()'s
    # verdict, generation with the static KV cache equal to the CPU's.
    assert "== a Llama-architecture transformers model" in r.stdout
    assert r.stdout.count("-> OK") >= 3  # the GPT-2-style block, Llama eager and compiled
    assert "explain() of a warm compiled step: " in r.stdout
    assert r.stdout.count("equal to CPU: True") == 2
    assert "ran through the CPU fallback: {}" not in r.stdout  # the stale line


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
