"""RBLN_PROFILER=1 -> status report + rbln_<timestamp>.pb -> trace round trip."""
# spec: O2, O4, O6

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
        assert "stages recorded     : 12" in out  # 2 inputs + 1 output + one compute phase
        (path,) = glob.glob(os.path.join(d, "rbln_*.pb"))
        assert f"output              : {path}" in out.replace(d + "/./", d + "/")
        profile = rbln_profile.load(path)
        assert profile["version"] == 1 and profile["dropped_executions"] == 0
        runs = profile["executions"]
        assert [e["id"] for e in runs] == [1, 2, 3]
        for e in runs:
            assert e["npu"] == 0 and e["program"]
            names = [s["name"] for s in e["stages"]]
            assert names == ["args_0", "args_1", "args_2", "compute_0"]
            kinds = [rbln_profile.STAGE_KINDS[s["kind"]] for s in e["stages"]]
            assert kinds == ["ARGS", "ARGS", "ARGS", "COMPUTE"]
            assert all(s["bytes"] == 64 * 128 * 2 for s in e["stages"][:3])
            starts = [s["start_ns"] for s in e["stages"]]
            assert e["start_ns"] <= starts[0] and starts == sorted(starts)
            assert all(s["end_ns"] >= s["start_ns"] for s in e["stages"])
            assert e["end_ns"] == e["stages"][-1]["end_ns"]
            # An unpartitioned program: one phase, run by worker 0 alone.
            (compute,) = e["stages"][3:]
            assert compute["phase"] == 0 and compute["worker"] == 0
            assert [w["worker"] for w in compute["workers"]] == [0]
        assert runs[0]["end_ns"] <= runs[1]["start_ns"]

        trace_path = os.path.join(d, "trace.json")
        assert rbln_profile.main([path, "--trace", trace_path]) == 0
        with open(trace_path) as f:
            trace = json.load(f)
        complete = [ev for ev in trace["traceEvents"] if ev["ph"] == "X"]
        assert len(complete) == 3 + 12  # one per execution + one per stage
        compute = [ev for ev in complete if ev["cat"] == "compute"]
        assert [ev["name"] for ev in compute] == ["i1_compute_0", "i2_compute_0", "i3_compute_0"]
        assert {ev["pid"] for ev in complete} == {"RBLN NPU 0"}
        assert {ev["tid"] for ev in compute} == {2}
        # Unix-time microseconds, so host and device rows line up.
        assert abs(compute[0]["ts"] / 1e6 - os.path.getmtime(path)) < 600
        names = {ev["args"]["name"] for ev in trace["traceEvents"] if ev["ph"] == "M"}
        assert names == {"RBLN NPU 0", "execution", "args (transfer)", "compute"}
        text = rbln_profile.summary(profile)
        assert "3 executions, 0 dropped" in text
        assert "COMPUTE" in text and "ARGS" in text


def test_partitioned_matmul_records_its_phases_with_worker_slices():
    # spec: O2, O4 -- seed 002's float16 512x512 mm, partitioned over the 4
    # chiplet workers: 3 compute stages (one per phase between its barriers),
    # each spanning the 4 workers' slices of that phase.
    with tempfile.TemporaryDirectory() as d:
        r = rbln_test_util.run_python(
            "import torch\n"
            "x = torch.randn(512, 512, dtype=torch.float16, device='rbln')\n"
            "(x @ x).cpu()\n",
            {"RBLN_PROFILER": "1", "RBLN_PROFILER_DIR": d, "RBLN_SIM_PROFILE": None},
            timeout=300,
        )
        assert r.returncode == 0, r.stderr
        (path,) = glob.glob(os.path.join(d, "rbln_*.pb"))
        profile = rbln_profile.load(path)
    (mm,) = [e for e in profile["executions"] if e["program"] == "mm"]
    kinds = [rbln_profile.STAGE_KINDS[s["kind"]] for s in mm["stages"]]
    # Two phases: the GEMM (reading the float16 operands itself) and the
    # rounding of its result to float16.
    assert kinds == ["ARGS"] * 3 + ["COMPUTE"] * 2
    previous_end = mm["stages"][2]["end_ns"]
    for phase, s in enumerate(mm["stages"][3:]):
        assert (s["name"], s["phase"], s["worker"]) == (f"compute_{phase}", phase, 0)
        assert [w["worker"] for w in s["workers"]] == [0, 1, 2, 3]
        assert s["start_ns"] == min(w["start_ns"] for w in s["workers"]) >= previous_end
        assert s["end_ns"] == max(w["end_ns"] for w in s["workers"])
        previous_end = s["end_ns"]
    assert previous_end <= mm["end_ns"]
    rows = [line.split()[:3] for line in rbln_profile.summary(profile).splitlines() if line.startswith("mm ")]
    assert rows == [["mm", "ARGS", "3"], ["mm", "COMPUTE", "2"]] + [["mm", f"W{w}", "2"] for w in range(4)]


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


def test_phases_get_the_compute_row_and_worker_slices_one_row_each():
    # spec: O2 -- a program partitioned over 4 chiplet workers with a barrier
    # between its 2 phases: one compute stage per phase on the compute row,
    # and each worker's slice of each phase (field 8, workers) on its own row.
    def stage(name, kind, start, end, phase=0, workers=()):
        return {"name": name, "kind": kind, "start_ns": start, "end_ns": end, "bytes": 0, "worker": 0,
                "phase": phase, "workers": [{"worker": w, "start_ns": a, "end_ns": b} for w, a, b in workers]}

    stages = [stage("args_0", 1, 0, 10)] + [
        stage(f"compute_{p}", 2, 10 + 20 * p, 25 + 20 * p, p, [(w, 10 + 20 * p + w, 20 + 20 * p + w) for w in range(4)])
        for p in range(2)
    ]
    profile = {
        "version": 1,
        "pid": 1,
        "clock_offset_ns": 0,
        "dropped_executions": 0,
        "executions": [{"id": 1, "program": "mm", "npu": 0, "start_ns": 0, "end_ns": 50, "stages": stages}],
    }
    trace = rbln_profile.to_chrome_trace(profile)
    complete = [ev for ev in trace["traceEvents"] if ev["ph"] == "X"]
    compute = [ev for ev in complete if ev["cat"] == "compute"]
    assert [(ev["name"], ev["tid"], ev["args"]["phase"]) for ev in compute] == [
        ("i1_compute_0", 2, 0),
        ("i1_compute_1", 2, 1),
    ]
    slices = [ev for ev in complete if ev["cat"] == "compute_slice"]
    assert [(ev["name"], ev["tid"]) for ev in slices[:4]] == [(f"i1_compute_0_W{w}", 3 + w) for w in range(4)]
    assert len(slices) == 8 and slices[7]["dur"] == 0.01  # 10 ns
    rows = {ev["args"]["name"] for ev in trace["traceEvents"] if ev["ph"] == "M"}
    assert rows == {"RBLN NPU 0", "execution", "args (transfer)", "compute"} | {f"compute W{w}" for w in range(4)}
    lines = rbln_profile.summary(profile).splitlines()
    assert [line.split()[:3] for line in lines[1:7]] == [
        ["mm", "ARGS", "1"],
        ["mm", "COMPUTE", "2"],
        ["mm", "W0", "2"],
        ["mm", "W1", "2"],
        ["mm", "W2", "2"],
        ["mm", "W3", "2"],
    ]
    # The wire fields decode: Stage{phase: 2, workers: [{worker: 3, npu: 1,
    # chiplet: 2}]} inside Execution{stages} inside Profile{executions}; a
    # worker slice names its compute unit (SPEC A7).
    encoded = bytes([0x22, 0x0C, 0x32, 0x0A, 0x38, 0x02, 0x42, 0x06,
                     0x08, 0x03, 0x20, 0x01, 0x28, 0x02])
    decoded = rbln_profile.decode(encoded)["executions"][0]["stages"][0]
    assert decoded["phase"] == 2 and decoded["workers"] == [
        {"worker": 3, "start_ns": 0, "end_ns": 0, "npu": 1, "chiplet": 2}]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
