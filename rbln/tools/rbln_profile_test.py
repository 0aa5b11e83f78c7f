"""RBLN_PROFILER=1 -> status report + rbln_<timestamp>.pb -> trace round trip."""
# spec: O4, O6

import glob
import json
import os
import sys
import tempfile

import pytest

import rbln_profile
import rbln_test_util

_STEP = (
    "import torch\n"
    "x = torch.ones(64, 128, dtype=torch.float16, device='rbln')\n"
    "y = torch.ones(64, 128, dtype=torch.float16, device='rbln')\n"
    "for _ in range(3):\n"
    "    z = (x + y).cpu()\n"
    "print('executions', torch.rbln.counters()['runtime/executions'])\n"
)


def _run(env):
    r = rbln_test_util.run_python(_STEP, env)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_profiler_writes_report_and_file_that_converts_to_a_trace():
    # spec: O4, O6
    with tempfile.TemporaryDirectory() as d:
        out = _run({"RBLN_PROFILER": "1", "RBLN_PROFILER_DIR": d})
        executions = int(out.split("executions ")[1].split()[0])
        assert executions == 3
        assert "RBLN Profiler Generation Status Report" in out
        assert "executions recorded : 3 (0 dropped)" in out
        assert "stages recorded     : 12" in out  # 2 inputs + 1 output + compute
        (path,) = glob.glob(os.path.join(d, "rbln_*.pb"))
        assert f"output              : {path}" in out.replace(d + "/./", d + "/")
        profile = rbln_profile.load(path)
        assert profile["version"] == 1 and profile["dropped_executions"] == 0
        runs = profile["executions"]
        assert [e["id"] for e in runs] == [1, 2, 3]
        for e in runs:
            assert e["npu"] == 0 and e["program"]
            names = [s["name"] for s in e["stages"]]
            assert names == ["args_0", "args_1", "args_2", "compute"]
            kinds = [rbln_profile.STAGE_KINDS[s["kind"]] for s in e["stages"]]
            assert kinds == ["ARGS", "ARGS", "ARGS", "COMPUTE"]
            assert all(s["bytes"] == 64 * 128 * 2 for s in e["stages"][:3])
            starts = [s["start_ns"] for s in e["stages"]]
            assert e["start_ns"] <= starts[0] and starts == sorted(starts)
            assert all(s["end_ns"] >= s["start_ns"] for s in e["stages"])
            assert e["end_ns"] == e["stages"][-1]["end_ns"]
        assert runs[0]["end_ns"] <= runs[1]["start_ns"]

        trace_path = os.path.join(d, "trace.json")
        assert rbln_profile.main([path, "--trace", trace_path]) == 0
        with open(trace_path) as f:
            trace = json.load(f)
        complete = [ev for ev in trace["traceEvents"] if ev["ph"] == "X"]
        assert len(complete) == 3 + 12  # one per execution + one per stage
        compute = [ev for ev in complete if ev["cat"] == "compute"]
        assert [ev["name"] for ev in compute] == ["i1_compute", "i2_compute", "i3_compute"]
        assert {ev["pid"] for ev in complete} == {"RBLN NPU 0"}
        assert {ev["tid"] for ev in compute} == {2}
        # Unix-time microseconds, so host and device rows line up.
        assert abs(compute[0]["ts"] / 1e6 - os.path.getmtime(path)) < 600
        names = {ev["args"]["name"] for ev in trace["traceEvents"] if ev["ph"] == "M"}
        assert names == {"RBLN NPU 0", "execution", "args (transfer)", "compute"}
        text = rbln_profile.summary(profile)
        assert "3 executions, 0 dropped" in text
        assert "COMPUTE" in text and "ARGS" in text


def test_no_profiler_no_report_no_file():
    # spec: O3, O4
    with tempfile.TemporaryDirectory() as d:
        out = _run({"RBLN_PROFILER": None, "RBLN_PROFILER_DIR": d})
        assert "RBLN Profiler" not in out
        assert glob.glob(os.path.join(d, "*.pb")) == []


def test_truncated_file_is_a_clear_error():
    good = bytes([0x08, 0x01, 0x22, 0x05, 0x12, 0x03]) + b"add"  # version 1, execution{program}
    assert rbln_profile.decode(good)["executions"][0]["program"] == "add"
    with pytest.raises(rbln_profile.ProfileFormatError, match="runs past the end"):
        rbln_profile.decode(good[:-1])


def test_worker_slices_get_one_compute_row_each():
    # spec: O2 -- a program partitioned over 4 chiplet workers reports 4 compute
    # slices (field 6, worker); each worker gets its own trace row.
    def stage(name, kind, start, end, worker=0):
        return {"name": name, "kind": kind, "start_ns": start, "end_ns": end, "bytes": 0, "worker": worker}

    stages = [stage("args_0", 1, 0, 10)] + [stage(f"compute_W{w}", 2, 10, 20 + w, w) for w in range(4)]
    profile = {
        "version": 1,
        "pid": 1,
        "clock_offset_ns": 0,
        "dropped_executions": 0,
        "executions": [{"id": 1, "program": "mm", "npu": 0, "start_ns": 0, "end_ns": 23, "stages": stages}],
    }
    trace = rbln_profile.to_chrome_trace(profile)
    compute = [ev for ev in trace["traceEvents"] if ev["ph"] == "X" and ev["cat"] == "compute"]
    assert [ev["tid"] for ev in compute] == [2, 3, 4, 5]
    rows = {ev["args"]["name"] for ev in trace["traceEvents"] if ev["ph"] == "M"}
    assert {"compute", "compute W1", "compute W2", "compute W3"} <= rows
    # The wire field decodes: Stage{worker: 3} inside Execution{stages}.
    encoded = bytes([0x22, 0x04, 0x32, 0x02, 0x30, 0x03])
    assert rbln_profile.decode(encoded)["executions"][0]["stages"][0]["worker"] == 3

if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
