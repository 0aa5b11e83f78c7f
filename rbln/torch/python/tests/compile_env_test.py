"""torch.compile(backend="rbln") in fresh processes: entry-point autoload
and TORCH_RBLN_DISABLE_FALLBACK (read at process start), progress logs and
the backend's process-wide Dynamo settings."""
# spec: J1, J2, J4, J5, J6, G4, I6 (splitting over RSD groups, A7/J8: compile_rsd_test.py)

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
        "f = torch.compile(lambda a: torch.special.airy_ai(a) + 1, backend='rbln',"
        " dynamic=False)\n"
        "f(torch.ones(64, 64, dtype=torch.float32, device='rbln'))\n",
        {"TORCH_RBLN_DISABLE_FALLBACK": "compile_error"},
    )
    assert r.returncode != 0
    assert "NotImplementedError: The following operators are not implemented: ['special_airy_ai']" in r.stderr
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


CACHE_DIR_RUN = (
    "import copy, os, torch\n"
    "torch.manual_seed(0)\n"
    "model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.GELU(),\n"
    "                            torch.nn.Linear(256, 128)).half()\n"
    "x = torch.randn(64, 128, dtype=torch.float16)\n"
    "with torch.no_grad():\n"
    "    ref = copy.deepcopy(model).float()(x.float()).half()\n"
    "model.to('rbln')\n"
    "f = torch.compile(model, backend='rbln', dynamic=False,\n"
    "                  options={'cache_dir': os.environ['CACHE_UNDER_TEST']})\n"
    "def run():\n"
    "    c0 = torch.rbln.counters()\n"
    "    with torch.inference_mode():\n"
    "        out = f(x.to('rbln')).cpu()\n"
    "    c1 = torch.rbln.counters()\n"
    "    d = {k: c1.get(k, 0) - c0.get(k, 0) for k in ('compiler/compiles', 'compiler/disk_hits')}\n"
    "    print('compiles', d['compiler/compiles'], 'disk_hits', d['compiler/disk_hits'])\n"
    "    return out\n"
    "out = run()\n"
    "torch.testing.assert_close(out, ref, atol=2e-2, rtol=2e-2)\n"
    "torch.save(out, os.environ['RESULT_FILE'])\n"
    "torch._dynamo.reset()\n"
    "print('entries', len(os.listdir(os.environ['CACHE_UNDER_TEST'])))\n"
    "again = run()\n"
    "print('equal_after_reset', torch.equal(again, out))\n"
)


def test_cache_dir_reuses_programs_across_processes(tmp_path):
    # spec: J5 -- options={"cache_dir"}: a second process loads the program
    # from disk (no codegen) and gets the same result; _dynamo.reset() keeps
    # the disk cache (the recompile after it is a disk hit too).
    cache = tmp_path / "rbln-programs"
    env = {"CACHE_UNDER_TEST": str(cache), "RBLN_COMPILER_CACHE_DIR": None}
    first = rbln_test_util.run_python(
        CACHE_DIR_RUN, dict(env, RESULT_FILE=str(tmp_path / "first.pt")))
    assert first.returncode == 0, first.stderr
    lines = first.stdout.splitlines()
    assert int(lines[0].split()[1]) >= 1 and lines[0].split()[3] == "0", lines
    entries = int(lines[1].split()[1])
    assert entries >= 2, lines  # <key>.o + <key>.manifest per program
    assert lines[2].split()[:2] == ["compiles", "0"] and int(lines[2].split()[3]) >= 1, lines
    assert lines[3] == "equal_after_reset True"

    second = rbln_test_util.run_python(
        CACHE_DIR_RUN, dict(env, RESULT_FILE=str(tmp_path / "second.pt")))
    assert second.returncode == 0, second.stderr
    lines = second.stdout.splitlines()
    assert lines[0].split()[:2] == ["compiles", "0"] and int(lines[0].split()[3]) >= 1, lines
    assert int(lines[1].split()[1]) == entries  # nothing new written
    import torch

    torch.testing.assert_close(
        torch.load(tmp_path / "second.pt"), torch.load(tmp_path / "first.pt"), rtol=0, atol=0)


PROGRESS = (
    "import torch\n"
    "def f(x):\n"
    "    y = torch.relu(x + torch.ones(64, 64, dtype=x.dtype, device=x.device).tril())\n"
    "    return y, torch.nonzero(y)[:, 0] + 1\n"
    "with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):\n"
    "    c = torch.compile(f, backend='rbln', dynamic=False)\n"
    "    y, idx = c(torch.randn(64, 64, dtype=torch.float16, device='rbln'))\n"
    "print(idx.shape[0] == int((y.cpu() != 0).sum()))\n"
)


def test_info_log_has_one_line_per_stage_with_elapsed_time():
    # spec: J5 -- long compiles report progress: FX->IR, compile per
    # segment, constants upload, each with its time.
    r = rbln_test_util.run_python(PROGRESS, {"TORCH_RBLN_LOG_LEVEL": "INFO"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True"]
    lines = [l for l in r.stderr.splitlines() if l.startswith("[TORCH-RBLN][INFO] graph ")]
    text = "\n".join(lines)
    import re

    assert re.search(r"rbln_graph_1_inference: 2 device segment\(s\), host ops: nonzero "
                     r"\(data-dependent output shape\)", text), text
    assert re.search(r"rbln_graph_1_inference_seg0: FX->IR [0-9.]+ ms \(\d+ ops\)", text), text
    assert re.search(r"rbln_graph_1_inference_seg0: compile [0-9.]+ ms", text), text
    # Segment 1 reads nonzero's result: converted and compiled at the first run.
    assert re.search(r"rbln_graph_1_inference_seg1: FX->IR [0-9.]+ ms .*shapes", text), text
    assert re.search(r"rbln_graph_1_inference_seg1: compile [0-9.]+ ms", text), text
    assert re.search(r"rbln_graph_1_inference_seg0: constants upload [0-9.]+ ms "
                     r"\(1 tensors, 8192 bytes;", text), text
    quiet = rbln_test_util.run_python(PROGRESS, {"TORCH_RBLN_LOG_LEVEL": None})
    assert quiet.returncode == 0 and "[TORCH-RBLN][INFO]" not in quiet.stderr


SETTINGS = (
    "import torch\n"
    "torch._dynamo.config.automatic_dynamic_shapes = True\n"
    "f = torch.compile(lambda a: a * 2.5, backend='rbln', dynamic=False)\n"
    "f(torch.ones(4, 4, device='rbln'))\n"
    "print(torch._dynamo.config.specialize_float, torch._dynamo.config.automatic_dynamic_shapes)\n"
)


def test_process_wide_dynamo_settings_respect_the_user_and_the_opt_out():
    # spec: G4, J2 -- the backend sets specialize_float / automatic_dynamic_shapes
    # when it loads, except values the user chose; TORCH_RBLN_DYNAMO_PROCESS_CONFIG=0
    # leaves both alone.
    r = rbln_test_util.run_python(SETTINGS)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "True"]
    off = rbln_test_util.run_python(SETTINGS, {"TORCH_RBLN_DYNAMO_PROCESS_CONFIG": "0"})
    assert off.returncode == 0, off.stderr
    assert off.stdout.split() == ["False", "True"]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
