"""torch.rbln.memory._record_memory_history / _snapshot / _dump_snapshot in
PyTorch's snapshot format, rendered by torch.cuda._memory_viz's own code;
the snapshot written on OOM is checked by cuda_parity_test.py."""
# spec: E5 (per-chiplet memory in the snapshot); the history itself is
# torch.cuda parity (issue 18), no SPEC ID.

import base64
import json
import pickle
import re
import sys

import pytest
import torch
from torch.cuda import _memory_viz


memory = torch.rbln.memory


def _identity(lines):
    return lines  # format_flamegraph without flamegraph.pl: the folded stacks.


def make_weights():
    return torch.randn(256, 256, dtype=torch.bfloat16).to("rbln")


def train_step(model, opt, x):
    opt.zero_grad()
    loss = model(x).float().square().mean()
    loss.backward()
    opt.step()
    return loss


@pytest.fixture
def recording():
    memory._record_memory_history("all", stacks="python", clear_history=True)
    yield
    memory._record_memory_history(None, clear_history=True)


def test_training_step_renders_with_memory_viz(recording, tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256))
    model = model.to(torch.bfloat16).to("rbln")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(64, 256, dtype=torch.bfloat16).to("rbln")
    keep = make_weights()
    keep = keep * 2  # A device op: its block is acquired now.
    train_step(model, opt, x)
    path = tmp_path / "snapshot.pickle"
    memory._dump_snapshot(str(path))
    with open(path, "rb") as f:
        data = pickle.load(f)

    # The format: segments with blocks, one trace per chiplet.
    chiplets = torch.rbln.get_device_properties().num_chiplet
    assert len(data["device_traces"]) == chiplets
    devices = {seg["device"] for seg in data["segments"]}
    assert len(devices) > 1, devices  # Memory spread over chiplets (SPEC E5).
    for seg in data["segments"]:
        assert seg["chiplet"] == seg["device"] % chiplets
        assert sum(b["size"] for b in seg["blocks"]) == seg["total_size"]
        assert seg["blocks"][0]["address"] == seg["address"]
    per_chiplet = memory.memory_stats_per_chiplet()
    for d in devices:
        reserved = sum(s["total_size"] for s in data["segments"] if s["device"] == d)
        assert reserved == per_chiplet[f"npu.0.chiplet.{d}.reserved_bytes.all.current"]
    actions = {e["action"] for trace in data["device_traces"] for e in trace}
    assert {"segment_alloc", "alloc", "free_requested", "free_completed"} <= actions, actions

    # Python stacks: where each live tensor was made.
    block = next(b for s in data["segments"] for b in s["blocks"]
                 if b["state"] == "active_allocated" and any(f["name"] == "test_training_step_renders_with_memory_viz"
                                                             and f["line"] > 0 for f in b["frames"]))
    names = [f["name"] for f in block["frames"]]
    assert "test_training_step_renders_with_memory_viz" in names
    backward_or_step = [e for t in data["device_traces"] for e in t
                        if e["action"] == "alloc" and any(f["name"] == "train_step" for f in e["frames"])]
    assert backward_or_step, "the training step's allocations carry its frame"

    # PyTorch's own renderers.
    summary = _memory_viz.segsum(data)  # Checks that every byte is accounted for.
    assert f"segments: {len(data['segments'])}" in summary
    trace_text = _memory_viz.trace(data)
    assert "cudaMalloc" in trace_text and "Device 0 ----" in trace_text
    folded = _memory_viz.memory(data, format_flamegraph=_identity)
    assert "memory_history_test.py:" in folded and "test_training_step_renders_with_memory_viz" in folded
    assert "active_allocated" in _memory_viz.segments(data, format_flamegraph=_identity)
    for html in (_memory_viz.trace_plot(data), _memory_viz.segment_plot(data)):
        files = json.loads(re.search(r"const local_files = (\[.*\])", html).group(1))
        payload = base64.b64decode(files[0]["base64"]).rstrip(b"\x00")
        assert pickle.loads(payload)["segments"] == data["segments"]
    del keep


def test_history_options():
    memory._record_memory_history("all", stacks="python", max_entries=3, clear_history=True,
                                  skip_actions=["free_requested"])
    try:
        for _ in range(4):
            y = make_weights() * 2
            del y
        traces = memory._snapshot()["device_traces"]
        assert any(traces) and all(len(t) <= 3 for t in traces)
        assert all(e["action"] != "free_requested" for t in traces for e in t)
        memory._record_memory_history("state", stacks="python", clear_history=True)
        kept = make_weights() * 2
        snap = memory._snapshot()
        assert not any(snap["device_traces"])  # "state": no trace ...
        frames = [b["frames"] for s in snap["segments"] for b in s["blocks"] if b["state"] == "active_allocated"]
        assert any(any(f["name"] == "test_history_options" for f in fs) for fs in frames)  # ... but stacks.
        del kept
        with pytest.raises(ValueError, match="enabled must be None, 'state' or 'all'"):
            memory._record_memory_history("everything")
        with pytest.raises(ValueError, match="unknown action 'malloc'"):
            memory._record_memory_history("all", skip_actions=["malloc"])
    finally:
        memory._record_memory_history(None, clear_history=True)
    y = make_weights() * 2
    assert not any(memory._snapshot()["device_traces"])  # Off: nothing recorded.


# The snapshot written at an OOM (TORCH_RBLN_OOM_SNAPSHOT) is checked in a
# fresh process by cuda_parity_test.py's test_in_a_fresh_process.


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
