"""torch.profiler with the RBLN Profiler's Kineto bridge (seed 002's profile_matmul.py)."""
# spec: O1, O2, O3, O4, O5, O6

import json
import os
import sys
import tempfile

import pytest

import rbln_test_util

# Seed 002's profile_matmul.py, printing what the test checks.
PROFILE_MATMUL = """
import json, torch
from torch.profiler import DeviceType, ProfilerActivity, profile

x = torch.randn(512, 512, dtype=torch.float16, device="rbln")
with torch.inference_mode():
    (x @ x).cpu()  # warm-up: compile outside the profiled region

activities = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]
with torch.inference_mode(), profile(activities=activities) as prof:
    for _ in range(3):
        (x @ x).cpu()

print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=10))
device_events = [e for e in prof.events() if e.device_type == DeviceType.PrivateUse1]
print(f"{len(device_events)} device events, for example:", [e.name for e in device_events[:4]])
print("DEVICE_EVENTS", json.dumps([[e.name, e.device_time_total] for e in device_events]))
mm = [e for e in prof.key_averages() if e.key == "aten::mm"][0]
print("MM_SELF_RBLN", mm.self_device_time_total)
print("OPS", json.dumps(sorted({e.key for e in prof.key_averages()})))
print("CALLS", json.dumps({e.key: e.count for e in prof.key_averages()}))
prof.export_chrome_trace("trace.json")
"""


def _run(env, cwd):
    r = rbln_test_util.run_python(f"import os; os.chdir({cwd!r})\n" + PROFILE_MATMUL, env, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout


def _value(out, tag):
    return next(line.split(" ", 1)[1] for line in out.splitlines() if line.startswith(tag + " "))


def test_profile_matmul_with_rbln_profiler():
    # spec: O1, O2, O4, O5, O6
    with tempfile.TemporaryDirectory() as d:
        out = _run({"RBLN_PROFILER": "1", "RBLN_PROFILER_DIR": d}, d)
        header = next(line for line in out.splitlines() if "Self CPU %" in line)
        for column in ("Self RBLN", "Self RBLN %", "RBLN total", "RBLN time avg"):
            assert column in header
        assert "Self RBLN time total:" in out
        events = json.loads(_value(out, "DEVICE_EVENTS"))
        # Seed 002 shows 18 device events: 3 argument stages (two inputs,
        # one output) and 3 mm stages per call, and notes that the stages
        # are the compiled program's and change between releases. Ours are
        # 15: the compiler partitions the float16 512x512 mm over the 4
        # chiplets into two phases separated by a barrier -- the GEMM, which
        # reads the float16 operands itself (oneDNN, kF16), and float32 ->
        # float16 of the result -- each phase one compute stage (the chiplet
        # workers' slices stay in the .pb). Before the GEMM read float16
        # directly, widening both operands was a third phase (18 events).
        names = [n for n, _ in events]
        assert len(names) == 15, names
        for call in range(3):
            assert names[call * 5 : (call + 1) * 5] == [f"i1_{call}_W0_args_0_{a}" for a in range(3)] + [
                f"i1_{call}_W0_mm_{phase}" for phase in range(2)
            ]
        assert all(t >= 0 for _, t in events) and sum(t for n, t in events if "_mm_" in n) > 0
        example = names[:4]
        assert f"{len(names)} device events, for example: {example}" in out
        assert float(_value(out, "MM_SELF_RBLN")) == 0.0  # device time lives in its own events (O2)
        # O5: with TORCH_RBLN_DEPLOY unset the NaN/Inf check shows as its own ATen rows.
        ops = set(json.loads(_value(out, "OPS")))
        assert {"aten::mm", "aten::abs", "aten::isinf", "aten::isnan", "aten::ne"} <= ops
        # Seed 002's counts for 3 x@x: two inputs checked per call.
        calls = json.loads(_value(out, "CALLS"))
        assert [calls[k] for k in ("aten::abs", "aten::isinf", "aten::isnan", "aten::ne")] == [12, 6, 6, 6]
        # O4: the runtime's own report and file, printed when the session
        # ends, before the table (the warm-up run is in the same file).
        lines = out.splitlines()
        report = lines.index("  RBLN Profiler Generation Status Report")
        assert report < next(i for i, line in enumerate(lines) if "Self CPU %" in line)
        assert "  executions recorded : 4 (0 dropped)" in lines[report:]
        (pb,) = [f for f in os.listdir(d) if f.endswith(".pb")]  # nothing new to write at exit
        output = next(line for line in lines[report:] if line.startswith("  output"))
        assert pb.startswith("rbln_") and output.endswith("/" + pb)
        # O6: device events on their own row next to the host thread.
        with open(os.path.join(d, "trace.json")) as f:
            trace = json.load(f)
        device = [e for e in trace["traceEvents"] if e.get("name", "").startswith("i1_") and e.get("ph") == "X"]
        host = [e for e in trace["traceEvents"] if e.get("name") == "aten::mm" and e.get("ph") == "X"]
        assert len(device) == len(names) and host
        assert {e["pid"] for e in device}.isdisjoint({e["pid"] for e in host})
        mm_start = min(e["ts"] for e in host)
        assert min(e["ts"] for e in device) >= mm_start - 1  # same clock, device after submission


def test_profile_matmul_without_rbln_profiler():
    # spec: O3
    with tempfile.TemporaryDirectory() as d:
        out = _run({"RBLN_PROFILER": None, "RBLN_PROFILER_DIR": d}, d)
        assert "Self RBLN" not in out
        assert "0 device events" in out
        assert "RBLN Profiler Generation Status Report" not in out
        assert not any(f.endswith(".pb") for f in os.listdir(d))


def test_nan_inf_check_rows_only_without_deploy():
    # spec: O5 -- TORCH_RBLN_DEPLOY=ON skips the check: no rows, same mm.
    with tempfile.TemporaryDirectory() as d:
        ops = set(json.loads(_value(_run({"RBLN_PROFILER": None, "TORCH_RBLN_DEPLOY": "ON"}, d), "OPS")))
        assert "aten::mm" in ops
        assert not ops & {"aten::abs", "aten::isinf", "aten::isnan", "aten::ne", "aten::aminmax"}
        ops = set(json.loads(_value(_run({"RBLN_PROFILER": None, "TORCH_RBLN_DEPLOY": None}, d), "OPS")))
        assert {"aten::abs", "aten::isinf", "aten::isnan", "aten::ne"} <= ops


def test_bridge_is_off_on_atom():
    # spec: O1 -- host rows only; the runtime still records and writes its file.
    with tempfile.TemporaryDirectory() as d:
        out = _run({"RBLN_PROFILER": "1", "RBLN_PROFILER_DIR": d, "RBLN_SIM_PROFILE": "atom"}, d)
        assert "0 device events" in out and "Self RBLN" not in out
        assert "RBLN Profiler Generation Status Report" in out
        assert any(f.endswith(".pb") for f in os.listdir(d))


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
