"""Device memory statistics, the E6 summary and per-chiplet OOM."""
# spec: D3, E1, E2, E3, E4, E5, E6, E7

import json
import re
import sys

import pytest
import torch

import rbln_test_util

UNIT = 4096  # The profile's allocation unit.


def test_spec_e3_lazy_then_counted():
    # spec: E3, D3 -- 0 after placement; after x + x and .cpu(): a positive
    # multiple of the allocation unit; reserved >= allocated; peak.
    r = rbln_test_util.run_python(
        "import torch\n"
        "x = torch.randn(128, 128).half().to('rbln')\n"
        "print(torch.rbln.memory_allocated())\n"
        "y = x + x; y.cpu()\n"
        "print(torch.rbln.memory_allocated(), torch.rbln.memory_reserved(), torch.rbln.max_memory_allocated())\n"
        "print(torch.accelerator.memory_allocated(), torch.accelerator.memory_reserved())\n"
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.split("\n")
    assert lines[0] == "0"
    allocated, reserved, peak = map(int, lines[1].split())
    assert allocated == 2 * 128 * 128 * 2  # x and y, each 32 KiB.
    assert allocated % UNIT == 0
    assert reserved >= allocated and peak >= allocated
    assert lines[2] == f"{allocated} {reserved}"


def test_peak_and_accumulated_resets():
    # spec: E4
    x = torch.ones(256, 64, dtype=torch.float16, device="rbln")
    y = x + x
    base = torch.rbln.memory_allocated()
    z = y + y
    peak = torch.rbln.max_memory_allocated()
    assert peak >= base + 256 * 64 * 2
    del z
    torch.rbln.reset_peak_memory_stats()
    assert torch.rbln.max_memory_allocated() == torch.rbln.memory_allocated()
    torch.rbln.reset_accumulated_memory_stats()
    stats = torch.rbln.memory_stats()
    assert stats["allocated_bytes.all.allocated"] == 0 and stats["allocated_bytes.all.freed"] == 0
    w = y + y
    assert torch.rbln.memory_stats()["allocated_bytes.all.allocated"] == 256 * 64 * 2
    del w


def test_stats_keys_and_per_chiplet_sums():
    # spec: E2, E5
    x = torch.ones(64, 64, dtype=torch.float16, device="rbln")
    ys = [x + x for _ in range(5)]
    total = torch.rbln.memory_stats()
    for key in ("allocated_bytes.all.current", "reserved_bytes.all.peak", "active_bytes.all.freed",
                "inactive_split_bytes.all.current", "num_alloc_retries", "num_ooms"):
        assert key in total
    per = torch.rbln.memory_stats_per_chiplet()
    chiplets = {re.match(r"npu\.(\d+)\.chiplet\.(\d+)\.", k).groups() for k in per}
    assert chiplets == {("0", "0"), ("0", "1"), ("0", "2"), ("0", "3")}
    for key in ("allocated_bytes.all.current", "reserved_bytes.all.current"):
        assert sum(per[f"npu.0.chiplet.{c}.{key}"] for c in range(4)) == total[key]
    # Placement by load spreads small tensors over the chiplets.
    used = [per[f"npu.0.chiplet.{c}.allocated_bytes.all.current"] > 0 for c in range(4)]
    assert sum(used) >= 3
    del ys


def test_spec_e6_summary_layout():
    # spec: E6
    x = torch.ones(512, 512, dtype=torch.float16, device="rbln")
    y = x + x
    text = torch.rbln.memory_summary()
    lines = text.split("\n")
    assert lines[0] == "torch_rbln memory summary (device=rbln:0, MiB)"
    assert re.fullmatch(r"scope: pid \d+ -- caching allocator only, this process only", lines[1])
    assert lines[2] == (
        "npu: physical NPU id as in device_summary() (relative to RBLN_VISIBLE_DEVICES, may differ from rbln-smi)"
    )
    assert lines[3] == "  npu  chiplet    allocated   alloc peak     reserved    resv peak       active       cached"
    assert lines[4] == "-" * 92 and lines[9] == "-" * 92
    rows = lines[5:9]
    for c, row in enumerate(rows):
        assert len(row) == 92
        assert re.fullmatch(r" {4}0 {8}" + str(c) + r"( +\d+\.\d){6}", row), row
    assert re.fullmatch(r" {9}total( +\d+\.\d){6}", lines[10])
    assert re.fullmatch(r"alloc retries: \d+   ooms: \d+", lines[11])
    # The total's reserved column is the sum of the rows (to display rounding).
    reserved = [float(r.split()[4]) for r in rows]
    assert abs(float(lines[10].split()[3]) - sum(reserved)) < 0.15
    del y


def test_spec_e7_one_chiplet_full_while_card_has_room():
    # spec: E7, D3 -- 64 MiB chiplets: an 80 MiB tensor cannot live on one
    # chiplet though the card has 256 MiB; the error and the summary say so.
    r = rbln_test_util.run_python(
        "import torch\n"
        "keep = torch.ones(64, dtype=torch.float16, device='rbln'); keep = keep + keep\n"
        "big = torch.empty(40 << 20, dtype=torch.float16, device='rbln')\n"
        "try:\n"
        "    big + big\n"
        "except torch.OutOfMemoryError as e:\n"
        "    print('OOM:', e)\n"
        "print(torch.rbln.memory_summary())\n"
        "print(keep.cpu()[:2].tolist(), torch.rbln.memory_stats()['num_ooms'])\n",
        {"RBLN_SIM_MEMORY_PER_CHIPLET": "64MiB"},
    )
    assert r.returncode == 0, r.stderr
    out = r.stdout
    m = re.search(r"OOM: rbln:0: out of device memory on NPU 0 chiplet (\d): tried to allocate 83886080 bytes", out)
    assert m, out
    assert "cannot span chiplets" in out
    assert "alloc retries: 0   ooms: 1" in out
    assert out.strip().split("\n")[-1] == "[2.0, 2.0] 1"


# Runs in a child with 32 MiB chiplets: a compiled graph whose workspace
# (up to 16 MiB of intermediate buffers per chiplet) fits an empty device
# runs once; then the device is filled with ballast down to fragments under
# 1 MiB, and the graph, an input it has to upload, and eager ops need memory.
_OOM_CHILD = """
import json, torch
import torch_rbln._dynamo as rbln_dynamo

MIB = 1 << 20
out = {}
keep = torch.arange(4096, dtype=torch.float16, device="rbln") * 1  # device-latest

def f(x):
    e = torch.exp(x)
    return (e @ e.t()).softmax(-1).sum(0)

x_host = (torch.randn(2048, 1024, generator=torch.Generator().manual_seed(0)) / 8).half()
x = x_host.to("rbln") * 1
compiled = torch.compile(f, backend="rbln", dynamic=False)
first = compiled(x).cpu()
(graph,) = rbln_dynamo.compiled_programs()
out["workspace"] = graph.inspect()["programs"][0]["partitioning"]["workspace_bytes_per_chiplet"]
host = torch.ones(2048, 1024, dtype=torch.float16).to("rbln")  # host-latest: no memory yet

torch.rbln.empty_cache()
ballast = []
for mib in (16, 8, 4, 2, 1):
    while True:
        try:
            ballast.append(torch.rbln.bind_device_memory(
                torch.empty(mib * MIB // 2, dtype=torch.float16, device="rbln")))
        except torch.OutOfMemoryError:
            break

def attempt(name, fn):
    before = torch.rbln.memory_allocated()
    ooms = torch.rbln.memory_stats()["num_ooms"]
    try:
        fn()
        out[name] = {"raised": None}
        return
    except torch.OutOfMemoryError as e:
        out[name] = {"raised": "OutOfMemoryError", "message": str(e)}
    except Exception as e:
        out[name] = {"raised": type(e).__name__, "message": str(e)}
    out[name]["allocated_unchanged"] = torch.rbln.memory_allocated() == before
    out[name]["ooms"] = torch.rbln.memory_stats()["num_ooms"] - ooms

attempt("graph_workspace", lambda: compiled(x))
attempt("graph_input_upload", lambda: compiled(host))
attempt("eager_op", lambda: x * 2)
attempt("eager_copy", lambda: x.clone())
attempt("bind_device_memory",
        lambda: torch.rbln.bind_device_memory(torch.empty(2 * MIB, device="rbln")))
out["keep_intact"] = torch.equal(keep.cpu(), torch.arange(4096, dtype=torch.float16))
out["x_intact"] = torch.equal(x.cpu(), x_host)
del ballast
out["rerun_equal"] = torch.equal(compiled(x).cpu(), first)
out["host_input_runs"] = compiled(host).shape == (2048,)
print(json.dumps(out))
"""


def test_every_device_oom_is_torch_out_of_memory_error():
    # spec: E7 -- issue 28: a compiled program's workspace (and an input
    # uploaded when it runs) out of device memory raises torch.OutOfMemoryError
    # as eager allocations do, with the eager message's detail; nothing on
    # the device is lost, nothing stays allocated, and the same program runs
    # once memory is free.
    r = rbln_test_util.run_python(_OOM_CHILD, {"RBLN_SIM_MEMORY_PER_CHIPLET": "32MiB"},
                                  timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert max(out["workspace"].values()) >= 4 << 20, out["workspace"]
    detail = re.compile(
        r"^rbln:0: out of device memory on NPU 0 chiplet \d: tried to allocate \d+ bytes; "
        r"chiplet \d has \d+ bytes free and \d+ cached of 33554432; .*"
        r"after rounding to 4096-byte units")
    for case in ("graph_workspace", "graph_input_upload", "eager_op", "eager_copy",
                 "bind_device_memory"):
        got = out[case]
        assert got["raised"] == "OutOfMemoryError", (case, got)
        assert detail.search(got["message"]), (case, got["message"])
        assert got["allocated_unchanged"], (case, got)
        assert got["ooms"] >= 1, (case, got)
    assert re.search(r"while allocating the workspace of worker \d of program rbln_graph_\w+ "
                     r"\(\d+ bytes of intermediate buffers on npu\.0\.chiplet\.\d\)",
                     out["graph_workspace"]["message"]), out["graph_workspace"]["message"]
    assert out["keep_intact"] and out["x_intact"], out
    assert out["rerun_equal"] and out["host_input_runs"], out


def test_e1_empty_cache_returns_memory_and_drops_programs():
    # spec: E1
    r = rbln_test_util.run_python(
        "import torch\n"
        "c = lambda: torch.rbln.counters()['compiler/compiles']\n"
        "x = torch.ones(64, 64, dtype=torch.float16, device='rbln')\n"
        "y = x + x; del y\n"
        "print(torch.rbln.memory_allocated(), torch.rbln.memory_reserved(), c())\n"
        "torch.rbln.empty_cache()\n"
        "print(torch.rbln.memory_allocated(), torch.rbln.memory_reserved())\n"
        "y = x + x\n"
        "print(c())\n"
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.split("\n")
    alloc0, resv0, compiles0 = map(int, lines[0].split())
    alloc1, resv1 = map(int, lines[1].split())
    compiles1 = int(lines[2])
    assert resv1 < resv0 and alloc1 == alloc0
    assert compiles1 == compiles0 + 1  # The warm cache was dropped: it compiles again.


def test_snapshot_lists_segments_and_blocks():
    x = torch.ones(1024, dtype=torch.float16, device="rbln")
    y = x + x
    snap = torch.rbln.memory_snapshot()
    assert snap and all({"npu", "chiplet", "total_size", "allocated_size", "blocks"} <= set(s) for s in snap)
    for seg in snap:
        assert sum(b["size"] for b in seg["blocks"]) == seg["total_size"]
    assert sum(s["allocated_size"] for s in snap) == torch.rbln.memory_allocated()
    del y


def test_statistics_before_first_use_do_not_commit():
    r = rbln_test_util.run_python(
        "import torch\n"
        "print(torch.rbln.memory_allocated(), torch.rbln.memory_reserved(), torch.rbln.is_initialized())\n"
        "print(len(torch.rbln.memory_summary().split(chr(10))))\n"
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:2] == ["0 0 False", "12"]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
