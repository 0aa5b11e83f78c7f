"""torch.compile(backend="rbln") splits each program over the NPUs of the
inputs' RSD group (SPEC A2, A7, J5, J8): in fresh processes with simulated
multi-NPU groups, results equal PyTorch CPU, inspect() shows the workers per
NPU and the workspace per chiplet, explain() shows the work across NPUs, and
a num_devices the group cannot run is a clear error."""
# spec: A2, A7, J5, J8

import json
import sys

import pytest

import rbln_test_util

# A two-NPU ATOM group; every program is split (no size threshold).
ATOM_PAIR = {
    "RBLN_SIM_PROFILE": "atom", "RBLN_SIM_NPUS": "2", "RBLN_NPUS_PER_DEVICE": "2",
    "RBLN_COMPILER_PARTITION_MIN_WORK": "0",
}

# attention-like block: mm, softmax, layer norm, gelu (internal buffers,
# barriers); float16 against PyTorch CPU float32.
BLOCK = (
    "import json, torch\n"
    "from torch_rbln import _C\n"
    "torch.manual_seed(0)\n"
    "def block(x, w1, w2):\n"
    "    a = torch.softmax(x @ w1, dim=-1)\n"
    "    h = torch.nn.functional.layer_norm(a @ w2 + x, (x.shape[-1],))\n"
    "    return torch.nn.functional.gelu(h)\n"
    "x, w1, w2 = torch.randn(64, 32) * 0.5, torch.randn(32, 32) * 0.5, torch.randn(32, 32) * 0.5\n"
    "want = block(x, w1, w2)\n"
    "dev = [t.half().to('rbln') for t in (x, w1, w2)]\n"
    "def check(f):\n"
    "    got = f(*dev).cpu().float()\n"
    "    return bool(torch.allclose(got, want, atol=3e-2, rtol=3e-2))\n"
)


def _run(code, env):
    r = rbln_test_util.run_python(code, env, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    return r


def test_programs_split_over_a_two_npu_group():
    # spec: A7, J5, J8 -- without the option and with num_devices=2 a program
    # for a 2-NPU group runs one worker on each NPU; no warning any more.
    r = _run(BLOCK + (
        "c = _C._counters()\n"
        "f = torch.compile(block, backend='rbln', dynamic=False)\n"
        "print(check(f))\n"
        "two = torch.compile(block, backend='rbln', options={'num_devices': 2})\n"
        "with torch.rbln.explain() as region:\n"
        "    ok = check(two)\n"
        "print(ok)\n"
        "after = _C._counters()\n"
        "d = lambda k: after.get(k, 0) - c.get(k, 0)\n"
        "print(json.dumps({'npu0': d('runtime/slices/npu.0.chiplet.0'),\n"
        "                  'npu1': d('runtime/slices/npu.1.chiplet.0'),\n"
        "                  'multi': d('runtime/multi_npu_executions'),\n"
        "                  'workspace': d('runtime/workspace_bytes')}))\n"
        "g = [p for p in torch.rbln.compiled_programs() if p.inspect()['programs']][-1]\n"
        "print(json.dumps(g.inspect()['programs'][0]['partitioning']))\n"
        "print(json.dumps(_C._chiplet_memory(1)))\n"
        "print(region.report())\n"
    ), ATOM_PAIR)
    lines = r.stdout.splitlines()
    assert lines[:2] == ["True", "True"], r.stdout
    counts = json.loads(lines[2])
    # Two compiled functions, each run once, each split over both NPUs.
    assert counts["npu0"] == 2 and counts["npu1"] == 2, counts
    assert counts["multi"] == 2, counts
    assert counts["workspace"] > 0, counts
    part = json.loads(lines[3])
    assert part["num_npus"] == 2 and part["workers"] == 2, part
    assert part["workers_per_npu"] == {"npu.0": 1, "npu.1": 1}, part
    ws = part["workspace_bytes_per_chiplet"]
    assert set(ws) == {"npu.0.chiplet.0", "npu.1.chiplet.0"}, ws
    assert sum(ws.values()) > 0, ws
    # The workspace of NPU 1's worker was homed in NPU 1's memory (cached
    # there after the run): NPU 1 holds no tensor of this process.
    used, free, total = json.loads(lines[4])[0]
    assert used > 0, lines[4]
    report = "\n".join(lines[5:])
    assert "inter-NPU link: 1 split runs, worker slices on npu.0 (1), npu.1 (1)" in report, report
    assert "not split over NPUs" not in r.stderr, r.stderr


def test_second_logical_device_splits_over_its_own_npus():
    # spec: A3, A7 -- rbln:1 of 4 NPUs in pairs is physical NPUs 2 and 3.
    env = dict(ATOM_PAIR, RBLN_SIM_NPUS="4")
    r = _run(BLOCK.replace("to('rbln')", "to('rbln:1')") + (
        "c = _C._counters()\n"
        "f = torch.compile(block, backend='rbln', dynamic=False)\n"
        "print(check(f), f(*dev).device)\n"
        "after = _C._counters()\n"
        "print(json.dumps(sorted(k.split('/')[-1] for k in after\n"
        "                        if k.startswith('runtime/slices/') and after[k] != c.get(k, 0))))\n"
        "g = [p for p in torch.rbln.compiled_programs() if p.inspect()['programs']][-1]\n"
        "print(json.dumps(g.inspect()['programs'][0]['partitioning']['workers_per_npu']))\n"
    ), env)
    lines = r.stdout.splitlines()
    assert lines[0] == "True rbln:1", r.stdout
    assert json.loads(lines[1]) == ["npu.2.chiplet.0", "npu.3.chiplet.0"], r.stdout
    assert json.loads(lines[2]) == {"npu.2": 1, "npu.3": 1}, r.stdout


def test_num_devices_the_group_cannot_run_is_a_clear_error():
    # spec: J5, A7 -- more NPUs than the group: the error names the group and
    # the fix; fewer: the program runs on the group's first NPUs.
    r = _run(BLOCK + (
        "one = torch.compile(block, backend='rbln', options={'num_devices': 1})\n"
        "print(check(one))\n"
        "g = [p for p in torch.rbln.compiled_programs() if p.inspect()['programs']][-1]\n"
        "print(json.dumps(g.inspect()['programs'][0]['partitioning']['workers_per_npu']))\n"
        "three = torch.compile(block, backend='rbln', options={'num_devices': 3})\n"
        "try:\n"
        "    three(*dev)\n"
        "except Exception as e:\n"
        "    print('ERROR', str(e).replace(chr(10), ' '))\n"
    ), dict(ATOM_PAIR, TORCH_RBLN_DISABLE_FALLBACK="compile_error"))
    lines = r.stdout.splitlines()
    assert lines[0] == "True", r.stdout
    assert json.loads(lines[1]) == {"npu.0": 1}, r.stdout
    assert lines[2].startswith("ERROR"), r.stdout
    assert "num_devices=3 but rbln:0 groups 2 NPU(s) (physical [0, 1])" in lines[2], lines[2]
    assert "use num_devices <= 2" in lines[2], lines[2]


def test_rebel100_splits_over_its_four_chiplets_and_rejects_more_npus():
    # spec: A2, J5 -- a Rebel100 card is one logical device of 4 chiplets;
    # num_devices=2 asks for a second card, which needs rbln-ccl.
    r = _run(BLOCK + (
        "f = torch.compile(block, backend='rbln', dynamic=False)\n"
        "print(check(f))\n"
        "g = [p for p in torch.rbln.compiled_programs() if p.inspect()['programs']][-1]\n"
        "print(json.dumps(g.inspect()['programs'][0]['partitioning']))\n"
        "two = torch.compile(block, backend='rbln', options={'num_devices': 2})\n"
        "try:\n"
        "    two(*dev)\n"
        "except Exception as e:\n"
        "    print('ERROR', str(e).replace(chr(10), ' '))\n"
    ), {"RBLN_SIM_PROFILE": "rebel100", "RBLN_COMPILER_PARTITION_MIN_WORK": "0",
        "TORCH_RBLN_DISABLE_FALLBACK": "compile_error"})
    lines = r.stdout.splitlines()
    assert lines[0] == "True", r.stdout
    part = json.loads(lines[1])
    assert part["workers"] == 4 and part["workers_per_npu"] == {"npu.0": 4}, part
    assert sorted(part["workspace_bytes_per_chiplet"]) == [
        f"npu.0.chiplet.{c}" for c in range(4)], part
    assert "num_devices=2 but rbln:0 groups 1 NPU(s)" in lines[2], lines[2]
    assert "rbln-ccl" in lines[2], lines[2]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
