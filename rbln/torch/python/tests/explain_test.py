"""torch.rbln.explain(): signals, the report layout, verdict/to_dict, nesting."""
# spec: N1, N2, N3, N4, D8, I3

import inspect
import json
import os
import sys

import pytest
import torch

import rbln_test_util

DEV = "rbln:0"
F16 = torch.float16


def _line_of(func, text):
    """Line number in this file of the first source line of `func` containing `text`."""
    lines, first = inspect.getsourcelines(func)
    for i, line in enumerate(lines):
        if text in line:
            return first + i
    raise AssertionError(f"{text!r} not in {func.__name__}")


# The seed's worked example (seed 000, end), kept as written there.
weight = torch.randn(128, 128, dtype=F16, device=DEV)
scale = torch.full((128, 128), 0.5, dtype=F16, device=DEV)


def step_eager(x_host):
    x = x_host.to(DEV)  # H2D every step
    h = torch.relu(x @ weight)
    if float(h.max()) > 1e4:  # value check: D2H and a wait
        h = h * 0.5
    counts = torch.ones(128, 128, dtype=torch.int32, device=DEV)  # a constant made every step
    h = h * counts.to(torch.float16)  # dtype conversion through the host
    return (h * scale)[:, :100]  # last dim not a multiple of 64


def step_body(x):
    return torch.relu(x @ weight) * scale


def explain_eager_step():
    """The seed's measurement of the eager step: warm-up, then one step in
    explain(with_stack=True); returns the region's facts and report."""
    x_host = torch.randn(128, 128, dtype=F16)
    with torch.inference_mode():
        step_eager(x_host).cpu()  # warm-up: compiles stay out of the region
        with torch.rbln.explain(with_stack=True) as bad:
            result = step_eager(x_host).cpu()
    assert result.shape == (128, 100)
    return {"facts": bad.to_dict(), "report": bad.report()}


def _eager_step_in_a_child(deploy):
    # TORCH_RBLN_DEPLOY is read once per process: run the step in a fresh one.
    r = rbln_test_util.run_python(
        "import json, explain_test\n"
        "print('N4', json.dumps(explain_test.explain_eager_step()))\n",
        {"TORCH_RBLN_DEPLOY": deploy},
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    line = next(line for line in r.stdout.splitlines() if line.startswith("N4 "))
    return json.loads(line[3:])


KIB32 = 128 * 128 * 2  # one float16 128x128 tensor
KIB64 = 128 * 128 * 4  # the int32 `counts`


def _check_eager_step_report(region, pushes, d2h_lines):
    """What both runs of the eager step share: one host_bounce signal at the
    int32 -> float16 line, the push line and the report layout."""
    d = region["facts"]
    assert d["verdict"] == "overhead"
    assert d["runtime"]["program_runs"] == 5  # mm, relu, max, two muls
    assert d["runtime"]["compiles"] == 0
    signals = d["signals"]
    assert list(signals) == ["host_bounce/d2d_copy"]
    bounce = signals["host_bounce/d2d_copy"]
    assert bounce["count"] == 1 and bounce["bytes"] == KIB64  # the int32 source
    here = "explain_test.py"
    convert_line = _line_of(step_eager, "counts.to(torch.float16)")
    (where,) = bounce["where"]
    assert where.startswith(f"{here}:{convert_line}(step_eager) <- {here}:"), where
    assert d["optimization_candidates"] == []  # max has an rbln kernel now

    lines = region["report"].splitlines()
    assert lines[0].startswith("[overhead: 1 signal]  RBLN EXPLAIN   (region wall ")
    assert " | device mem " in lines[0] and lines[0].endswith(" reserved)")
    assert pushes in lines
    rule = "--------------------  -----  --------  " + "-" * 59
    table = [
        rule,
        "Signal                Count     Bytes  Note",
        rule,
        "host_bounce/d2d_copy      1  64.0 KiB  real d2h DMA (costly) | try: make contiguous, or v2v engine",
        rule,
    ]
    start = lines.index(rule)
    assert lines[start - 1] == "" and lines[start : start + 5] == table
    body = lines[start + 5 :]
    assert body[:3] == ["", "  host_bounce/d2d_copy:", f"    at {where}"]
    assert body[3:] == ["", d2h_lines]
    assert "checked:" not in region["report"]


def test_n4_eager_step_reports_its_overhead():
    # spec: N1, N3, N4, D2, K3, H2 -- the eager half of the worked example as
    # the seed measured it: TORCH_RBLN_DEPLOY=ON, so no NaN/Inf-check reads.
    region = _eager_step_in_a_child("ON")
    rt = region["facts"]["runtime"]
    # 3 pushes (H2D DMA): x at its first device use (the mm); the int32
    # `counts` when the host bounce makes its source device-resident
    # (torch.ones is a host fill, so it had no device copy yet); the
    # converted float16 copy at its first device use (the mul).
    assert rt["push"] == {"count": 3, "bytes": 2 * KIB32 + KIB64, "uploads": 3, "write_through": 0}
    # 3 physical d2h: float(h.max()) reads the 2-byte maximum; the bounce
    # reads `counts` back from the device ("real d2h DMA (costly)"); .cpu()
    # downloads the result's storage.
    assert rt["physical_d2h"] == {"count": 3, "bytes": 2 + KIB64 + KIB32}
    # Host writes: x, the ones fill, the bounce's float16 result. Host reads:
    # the maximum, the bounce's source, the result's 128x100 view span.
    assert rt["h2v"] == {"count": 3, "bytes": 2 * KIB32 + KIB64}
    assert rt["v2h"] == {"count": 3, "bytes": 2 + KIB64 + (127 * 128 + 100) * 2}
    _check_eager_step_report(
        region,
        "  host->device push (runtime): 3 pushes, 128.0 KiB (3 at device use, 0 write-through)",
        "  >> physical d2h (real transfer): 3 copies, 96.0 KiB -- real device crossing",
    )


def test_n4_eager_step_with_checks_adds_the_nan_inf_reads():
    # spec: N3, N4, H1, H8 -- the same step with the pre-dispatch checks on
    # (TORCH_RBLN_DEPLOY unset): the NaN/Inf check reads each op's inputs on
    # the host, so device-latest inputs cost a D2H on top of the seed's 3.
    region = _eager_step_in_a_child(None)
    rt = region["facts"]["runtime"]
    # The pushes do not change: the check reads host-latest inputs (x at the
    # mm, the float16 copy at the mul) from host memory.
    assert rt["push"] == {"count": 3, "bytes": 2 * KIB32 + KIB64, "uploads": 3, "write_through": 0}
    # 3 more physical d2h: relu's input (the mm output), max's input (relu's
    # output, in sync afterwards, so the mul's check of h is free) and the
    # input of `* scale` (h * counts); then the seed's 3 as above.
    assert rt["physical_d2h"] == {"count": 6, "bytes": 3 * KIB32 + 2 + KIB64 + KIB32}
    _check_eager_step_report(
        region,
        "  host->device push (runtime): 3 pushes, 128.0 KiB (3 at device use, 0 write-through)",
        "  >> physical d2h (real transfer): 6 copies, 192.0 KiB -- real device crossing",
    )


def test_n4_graph_step_is_clean():
    # spec: N4 -- the graph half: a bound input buffer, one push, one d2h.
    if "rbln" not in torch._dynamo.list_backends():
        pytest.skip("the rbln torch.compile backend is not registered yet")
    step_graph = torch.compile(step_body, backend="rbln", dynamic=False)
    x_host = torch.randn(128, 128, dtype=F16)
    with torch.inference_mode():
        step_graph(x_host.to(DEV)).cpu()
        x_dev = torch.empty(128, 128, dtype=F16, device=DEV)
        torch.rbln.bind_device_memory(x_dev)
        x_dev.copy_(x_host)
        step_graph(x_dev).cpu()  # warm-up: binds the input buffer to the graph once
        with torch.rbln.explain(with_stack=True) as good:
            x_dev.copy_(x_host)
            result = step_graph(x_dev).cpu()
    expected = torch.relu(x_host.float() @ weight.cpu().float()) * 0.5
    torch.testing.assert_close(result.float(), expected, rtol=2e-2, atol=2e-2)
    assert good.verdict() == "clean", good.report()
    rt = good.to_dict()["runtime"]
    assert rt["push"]["count"] == 1 and rt["physical_d2h"]["count"] == 1
    assert rt["h2v"]["count"] == 1 and rt["v2h"]["count"] == 1
    lines = good.report().splitlines()
    assert lines[0].startswith("[clean]  RBLN EXPLAIN   (region wall ")
    assert lines[3] == "    v2h 32.0 KiB/1  h2v 32.0 KiB/1"
    assert lines[4] == "  host->device push (runtime): 1 pushes, 32.0 KiB (1 at device use, 0 write-through)" or (
        lines[4] == "  host->device push (runtime): 1 pushes, 32.0 KiB (0 at device use, 1 write-through)"
    )


def test_n4_gpt2_block_step_with_bound_input_is_clean():
    # spec: N4, J3 -- the compiled GPT-2-style block as the step (seed 000,
    # steps 1-7): token ids in a bound buffer, one push in, one d2h out.
    from torch_rbln.testing.gpt2_block import make_block

    torch._dynamo.reset()
    block = make_block(dim=128, heads=2, vocab=256, max_seq=64)
    idx_host = torch.randint(0, 256, (2, 48), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        expected = block(idx_host)
    step = torch.compile(block.to(DEV), backend="rbln", dynamic=False)
    with torch.inference_mode():
        step(idx_host.to(DEV)).cpu()  # warm-up: the compile
        idx_dev = torch.empty(2, 48, dtype=torch.int64, device=DEV)
        torch.rbln.bind_device_memory(idx_dev)
        idx_dev.copy_(idx_host)
        step(idx_dev).cpu()  # warm-up: binds the input buffer to the graph once
        with torch.rbln.explain(with_stack=True) as good:
            idx_dev.copy_(idx_host)
            result = step(idx_dev).cpu()
    torch._dynamo.reset()
    torch.testing.assert_close(result, expected, rtol=2e-2, atol=2e-2)
    print(good.report())
    assert good.verdict() == "clean", good.report()
    rt = good.to_dict()["runtime"]
    assert rt["push"]["count"] == 1 and rt["physical_d2h"]["count"] == 1, good.report()
    assert good.report().splitlines()[0].startswith("[clean]  RBLN EXPLAIN   (region wall ")


def test_clean_region_layout():
    # spec: N2, N3 -- an aligned float16 step with device-resident inputs.
    x = torch.randn(128, 128, dtype=F16).to(DEV)
    y = torch.randn(128, 128, dtype=F16).to(DEV)
    (x + y).cpu()  # warm-up: compile, and x, y reach the device
    with torch.rbln.explain() as r:
        out = (x + y).cpu()
    torch.testing.assert_close(out, x.cpu() + y.cpu())
    assert r.verdict() == "clean", r.report()
    lines = r.report().splitlines()
    assert lines[0].startswith("[clean]  RBLN EXPLAIN   (region wall ")
    assert lines[1] == ""
    assert lines[2] == "  rebel runtime: 1 program runs, " + lines[2].split(", ", 1)[1]
    assert lines[2].endswith(" in librbln")
    # Host reads: the NaN/Inf check reads x and y (in sync: served from host
    # memory, no DMA) and .cpu() reads the device-latest sum (one real d2h).
    assert lines[3] == "    v2h 96.0 KiB/3  h2v 0 B/0"
    assert lines[4] == "  host->device push (runtime): 0 pushes, 0 B"
    assert lines[5] == "  checked: host_bounce, v2v_slow, cpu_fallback, recompile -- none fired"
    assert lines[6] == '  note: clean = no hidden host overhead, not "fast"'
    assert lines[8] == "  >> physical d2h (real transfer): 1 copies, 32.0 KiB -- real device crossing"
    # The memory part of the header: the sum's 32 KiB were allocated in the region.
    assert r.to_dict()["device_memory"]["peak_allocated_bytes"] >= 128 * 128 * 2


def _region(fn, with_stack=False):
    with torch.rbln.explain(with_stack=with_stack) as r:
        fn()
    return r


def test_host_bounce_fires_for_converting_device_copy_only():
    # spec: N3, K3 -- an int32 -> float32 device copy goes through the host
    # (float conversions do not: device_cast_test.py); its device-latest
    # source is a real d2h.
    src = torch.ones(128, 128, dtype=torch.int32, device=DEV).clone()  # device-latest
    wide = torch.empty(128, 128, dtype=torch.float32, device=DEV)
    r = _region(lambda: wide.copy_(src))
    d = r.to_dict()
    assert d["signals"]["host_bounce/d2d_copy"]["count"] == 1
    assert d["signals"]["host_bounce/d2d_copy"]["bytes"] == 128 * 128 * 4
    assert d["runtime"]["physical_d2h"]["count"] == 1
    assert d["runtime"]["push"]["count"] == 0
    # The lazy destination is written on the host: host-latest, no device memory.
    assert torch.rbln._storage_info(wide)["state"] == "host-latest"
    assert not torch.rbln._storage_info(wide)["has_device_memory"]
    assert torch.equal(wide.cpu(), torch.full((128, 128), 1.0))
    # A host-latest source is made device-resident first (one push), then read
    # back from the device like a device-latest one (one d2h), as the source of
    # any device copy is; it is in sync afterwards.
    ints = torch.arange(128 * 128, dtype=torch.int32).reshape(128, 128).to(DEV)
    assert torch.rbln._storage_info(ints)["state"] == "host-latest"
    half = torch.empty(128, 128, dtype=F16, device=DEV)
    r = _region(lambda: half.copy_(ints))
    rt = r.to_dict()["runtime"]
    assert r.to_dict()["signals"]["host_bounce/d2d_copy"]["count"] == 1
    assert rt["push"]["count"] == 1 and rt["push"]["bytes"] == 128 * 128 * 4
    assert rt["physical_d2h"] == {"count": 1, "bytes": 128 * 128 * 4}
    assert torch.rbln._storage_info(ints)["state"] == "in-sync"
    assert torch.equal(half.cpu(), torch.arange(128 * 128, dtype=F16).reshape(128, 128))
    # A strided destination keeps the bytes between its elements.
    big = torch.full((128, 128), 7.0, dtype=torch.float32, device=DEV)
    big[:, ::2].copy_(src[:, ::2])
    expected = torch.full((128, 128), 7.0)
    expected[:, ::2] = 1.0
    assert torch.equal(big.cpu(), expected)
    # Same dtype and layout on one device: the device copy engine, no bounce
    # (set_device_layout_like keeps it on one chiplet: no v2v_slow either).
    same = torch.empty(128, 128, dtype=torch.int32, device=DEV)
    torch.rbln.set_device_layout_like(same, src)
    r = _region(lambda: same.copy_(src))
    assert r.verdict() == "clean", r.report()
    assert r.to_dict()["runtime"]["physical_d2h"]["count"] == 0
    assert torch.equal(same.cpu(), torch.ones(128, 128, dtype=torch.int32))


def test_strided_same_dtype_device_copy_stays_on_the_device():
    # spec: K2, N3 -- transposed, broadcast and sliced same-dtype copies go
    # through the DMA engine's strided descriptors: no host bounce, no d2h;
    # bytes of a strided destination between its elements are kept.
    base = torch.randn(128, 128).half()
    src = base.to(DEV)
    row = base[0].to(DEV)
    out_t = torch.empty(128, 128, dtype=F16, device=DEV)
    out_b = torch.empty(128, 128, dtype=F16, device=DEV)
    big = torch.zeros(128, 128, dtype=F16, device=DEV)
    before = torch.rbln.counters()

    def copies():
        out_t.copy_(src.t())
        out_b.copy_(row)  # broadcast [128] -> [128, 128]
        big[:, :64].copy_(src[:, 64:])

    r = _region(copies)
    after = torch.rbln.counters()
    d = r.to_dict()
    assert "host_bounce/d2d_copy" not in d["signals"] or d["signals"]["host_bounce/d2d_copy"]["count"] == 0
    assert d["runtime"]["physical_d2h"]["count"] == 0
    assert after["runtime/dma_d2d_strided_copies"] - before.get("runtime/dma_d2d_strided_copies", 0) == 3
    assert torch.equal(out_t.cpu(), base.t())
    assert torch.equal(out_b.cpu(), base[0].expand(128, 128))
    expected = torch.zeros(128, 128, dtype=F16)
    expected[:, :64] = base[:, 64:]
    assert torch.equal(big.cpu(), expected)


def _device_resident(n=64):
    t = torch.ones(n, 128, dtype=F16, device=DEV)
    t = t + t  # a device op: device-latest, on some chiplet
    return t


def test_v2v_slow_fires_for_cross_chiplet_copies_only():
    # spec: N3, D7 -- placement spreads tensors over the chiplets; a copy
    # between two chiplets is the slow v2v path until the layouts are aligned.
    src = _device_resident()
    chiplet = torch.rbln._storage_info(src)["chiplet"]
    others = []
    dst = None
    for _ in range(16):
        t = _device_resident()
        if torch.rbln._storage_info(t)["chiplet"] != chiplet:
            dst = t
            break
        others.append(t)
    if dst is None:
        pytest.skip("allocator placed every tensor on one chiplet")
    r = _region(lambda: dst.copy_(src), with_stack=True)
    slow = r.to_dict()["signals"]["runtime/v2v_slow"]
    assert slow["count"] == 1 and slow["bytes"] == 64 * 128 * 2
    (where,) = slow["where"]
    assert where.startswith(os.path.basename(__file__) + ":")
    torch.rbln.set_device_layout_like(dst, src)
    r = _region(lambda: dst.copy_(src))
    assert r.verdict() == "clean", r.report()
    assert torch.equal(dst.cpu(), src.cpu())


def explain_step_goals():
    """SPEC D8's step goals measured with explain(): an input buffer refilled
    from the host, intermediates that stay on the device, one result read at
    the end; then the same step with a mid-step host read, and with a
    constant made every step. Returns each region's runtime facts and the
    data states the step left."""
    w = torch.randn(128, 128, dtype=F16).to(DEV)
    x_host = torch.randn(128, 128, dtype=F16)
    inp = torch.empty(128, 128, dtype=F16, device=DEV)
    kept = {}

    def step(peek=False, fresh_constant=False):
        h = torch.relu(inp @ w)
        if peek:
            h[0, 0].item()  # one host read of a device-latest tensor mid-step
        c = torch.ones(128, 128, dtype=F16, device=DEV) if fresh_constant else w
        h = h * c
        kept["intermediate"] = h
        out = h + h
        kept["result"] = out
        return out

    def region(steps=1, **kw):
        with torch.rbln.explain() as r:
            for _ in range(steps):
                inp.copy_(x_host)  # step start: the input, host-latest
                step(**kw).cpu()  # step end: the result, read once
        return {"runtime": r.to_dict()["runtime"], "verdict": r.verdict(), "report": r.report()}

    with torch.inference_mode():
        for kw in ({}, {"peek": True}, {"fresh_constant": True}):
            inp.copy_(x_host)
            step(**kw).cpu()  # warm-up: every program compiled once
        out = {"clean": region()}
        out["states"] = {
            "input": torch.rbln._storage_info(inp)["state"],
            "intermediate": torch.rbln._storage_info(kept["intermediate"])["state"],
            "result": torch.rbln._storage_info(kept["result"])["state"],
        }
        out["peek"] = region(peek=True)
        out["fresh_constant"] = region(steps=2, fresh_constant=True)
    return out


def test_d8_step_goals_in_explain():
    # spec: D2, D8, N3 -- with TORCH_RBLN_DEPLOY=ON (no NaN/Inf-check reads;
    # DEPLOY is read at process start, hence the child): the input goes
    # host-latest -> in sync once (one push at its first device use), the
    # intermediates stay device-latest, the result goes device-latest -> in
    # sync once (one physical d2h).
    r = rbln_test_util.run_python(
        "import json, explain_test\n"
        "print('D8', json.dumps(explain_test.explain_step_goals()))\n",
        {"TORCH_RBLN_DEPLOY": "ON"},
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    got = json.loads(next(line for line in r.stdout.splitlines() if line.startswith("D8 "))[3:])
    assert got["states"] == {"input": "in-sync", "intermediate": "device-latest", "result": "in-sync"}
    clean = got["clean"]
    assert clean["verdict"] == "clean", clean["report"]
    rt = clean["runtime"]
    assert rt["push"] == {"count": 1, "bytes": 128 * 128 * 2, "uploads": 1, "write_through": 0}
    assert rt["physical_d2h"] == {"count": 1, "bytes": 128 * 128 * 2}
    assert rt["program_runs"] == 4  # mm, relu, mul, add
    lines = clean["report"].splitlines()
    assert "  host->device push (runtime): 1 pushes, 32.0 KiB (1 at device use, 0 write-through)" in lines
    assert "  >> physical d2h (real transfer): 1 copies, 32.0 KiB -- real device crossing" in lines
    # One host read of a device-latest intermediate mid-step adds a D2H (of
    # its storage) and nothing else; no signal names it -- only the count.
    peek = got["peek"]
    assert peek["verdict"] == "clean", peek["report"]
    assert peek["runtime"]["push"]["count"] == 1
    assert peek["runtime"]["physical_d2h"] == {"count": 2, "bytes": 2 * 128 * 128 * 2}
    assert "  >> physical d2h (real transfer): 2 copies, 64.0 KiB -- real device crossing" in (
        peek["report"].splitlines()
    )
    # A host-latest constant made every step repeats an H2D every step: two
    # steps push the input and the constant twice each.
    fresh = got["fresh_constant"]
    assert fresh["runtime"]["push"] == {"count": 4, "bytes": 4 * 128 * 128 * 2, "uploads": 4, "write_through": 0}
    assert fresh["runtime"]["physical_d2h"]["count"] == 2  # one result per step


def test_i3_physical_d2h_tells_host_latest_from_device_fallback_arguments():
    # spec: I3, N3 -- a CPU fallback (torch.sin has no rbln kernel) moves its
    # arguments to the host: a lazy tensor whose latest data is still in host
    # memory costs no D2H; one whose data is on the device costs a DMA.
    lazy = torch.randn(128, 128, dtype=F16).to(DEV)
    assert torch.rbln._storage_info(lazy)["state"] == "host-latest"
    r = _region(lambda: torch.sin(lazy))
    assert r.to_dict()["signals"]["dispatch/cpu_fallback"]["count"] == 1
    assert r.to_dict()["runtime"]["physical_d2h"] == {"count": 0, "bytes": 0}
    assert "  >> physical d2h (real transfer): 0 copies, 0 B -- real device crossing" in r.report().splitlines()
    on_device = lazy + lazy  # device-latest
    r = _region(lambda: torch.sin(on_device))
    assert r.to_dict()["signals"]["dispatch/cpu_fallback"]["count"] == 1
    assert r.to_dict()["runtime"]["physical_d2h"] == {"count": 1, "bytes": 128 * 128 * 2}
    assert "  >> physical d2h (real transfer): 1 copies, 32.0 KiB -- real device crossing" in (
        r.report().splitlines()
    )
    torch.testing.assert_close(torch.sin(on_device).cpu(), torch.sin(on_device.cpu()))


def test_cpu_fallback_fires_for_fallbacks_only():
    # spec: N3, I3
    x = torch.randn(128, 128, dtype=F16).to(DEV)
    r = _region(lambda: torch.sin(x))
    fb = r.to_dict()["signals"]["dispatch/cpu_fallback"]
    # torch.sin reaches the backend as its out= overload.
    assert fb["count"] == 1 and fb["why"] == {"aten::sin.out: unsupported_op": 1}
    assert fb["bytes"] == 2 * 128 * 128 * 2  # x and the out= tensor both go to the host
    assert "    why: aten::sin.out: unsupported_op" in r.report().splitlines()
    # A dtype the compiled kernels do not take: the shim's dtype check.
    f32 = torch.randn(128, 128).to(DEV)
    r = _region(lambda: f32 + f32)
    assert r.to_dict()["signals"]["dispatch/cpu_fallback"]["why"] == {"aten::add.Tensor: dtype": 1}
    # An aligned float16 op after warm-up runs its program: nothing fires.
    x + x
    r = _region(lambda: x + x)
    assert r.to_dict()["signals"] == {}


def test_recompile_fires_for_wrapper_checks_and_compiles_only():
    # spec: N3, H1, H3 -- a 3-element add fails the alignment check after
    # every warm-cache miss: each call is a recompile, not a cpu_fallback.
    x = torch.ones(3, dtype=F16, device=DEV)
    x + x

    def three():
        for _ in range(3):
            x + x

    r = _region(three, with_stack=True)
    sig = r.to_dict()["signals"]
    assert list(sig) == ["dispatch/recompile"]
    assert sig["dispatch/recompile"]["count"] == 3
    assert sig["dispatch/recompile"]["why"] == {"aten::add.Tensor: alignment": 3}
    (where,) = sig["dispatch/recompile"]["where"]
    assert sig["dispatch/recompile"]["where"][where] == 3
    assert f"(three) <- " in where
    assert "  (x3)" in r.report()
    # A shape never seen before compiles in the region: also a recompile.
    odd = torch.ones(3 * 64, 5 * 64, dtype=F16, device=DEV)
    r = _region(lambda: odd * odd)
    rec = r.to_dict()["signals"]["dispatch/recompile"]
    assert rec["why"] == {"compiled 1 new program(s) in the region": 1}
    # The same call again is warm: clean.
    r = _region(lambda: odd * odd)
    assert r.verdict() == "clean", r.report()


def test_optimization_candidates_name_the_fix_of_each_reason():
    # spec: N3, H1, H3, H6, I4 -- each check-decided fallback's candidate line
    # says how to avoid it, not a generic "supported dtype/op".
    three = torch.ones(3, dtype=F16, device=DEV)
    view = torch.ones(2, 64, dtype=F16, device=DEV)[1:]
    f32 = torch.ones(64, device=DEV)
    nan = torch.full((64,), float("nan"), dtype=F16, device=DEV)
    half = torch.ones(64, dtype=F16, device=DEV)

    def fallbacks():
        three + three
        view + half
        f32 * f32
        nan - half
        torch.sin(half)

    r = _region(fallbacks)
    fixes = {c["op"]: (c["why"], c["fix"]) for c in r.to_dict()["optimization_candidates"]}
    assert fixes == {
        "aten::add.Tensor": (
            ["alignment", "storage_offset"],
            [
                "pad the last dim to a multiple of 64, or torch.compile the block",
                "make the view start at offset 0 (.clone() it) or torch.compile the block",
            ],
        ),
        "aten::mul.Tensor": (["dtype"], ["use float16 or bfloat16 (one dtype per op)"]),
        "aten::sub.Tensor": (
            ["nan_inf"],
            ["replace NaN/Inf in the inputs (e.g. torch.nan_to_num) or torch.compile the block"],
        ),
        "aten::sin.out": (["unsupported_op"], ["no rbln kernel: torch.compile the block"]),
    }, fixes
    lines = r.report().splitlines()
    assert (
        "    aten::mul.Tensor  x1  (dtype) | try: use float16 or bfloat16 (one dtype per op)" in lines
    ), r.report()
    assert (
        "    aten::add.Tensor  x2  (alignment, storage_offset) | try: pad the last dim to a multiple "
        "of 64, or torch.compile the block; make the view start at offset 0 (.clone() it) or "
        "torch.compile the block"
    ) in lines, r.report()
    # The signal table's notes (N3's layout) are unchanged.
    assert any(
        l.endswith("ran on CPU, args via host | try: supported dtype/op, or torch.compile") for l in lines
    ), r.report()


def test_nesting_is_a_clear_error():
    # spec: N1
    with torch.rbln.explain() as outer:
        with pytest.raises(RuntimeError, match="cannot nest"):
            with torch.rbln.explain(with_stack=True):
                pass
    assert outer.verdict() == "clean"
    # Regions work again afterwards, also with stacks.
    with torch.rbln.explain(with_stack=True) as again:
        pass
    assert again.verdict() == "clean"
    with pytest.raises(RuntimeError, match="after the `with` block"):
        with torch.rbln.explain() as r:
            r.report()
    with pytest.raises(RuntimeError, match="already used"):
        with r:
            pass


def test_to_dict_is_json_and_matches_report():
    # spec: N1 -- the structured form CI asserts on.
    x = torch.randn(128, 128, dtype=F16).to(DEV)
    with torch.rbln.explain() as r:
        torch.sin(x).cpu()
    d = json.loads(json.dumps(r.to_dict()))
    assert d["verdict"] == "overhead" == r.verdict()
    assert set(d) == {
        "verdict", "with_stack", "wall_seconds", "device_memory", "runtime",
        "signals", "checked", "optimization_candidates",
    }
    assert d["checked"] == ["host_bounce", "v2v_slow", "cpu_fallback", "recompile"]
    assert d["signals"]["dispatch/cpu_fallback"]["where"] == {}  # no stacks without with_stack
    assert d["wall_seconds"] > 0
    assert r.report().startswith("[overhead: 1 signal]  RBLN EXPLAIN")
    assert "    at " not in r.report()


def test_explain_in_a_fresh_process_before_any_device_use():
    # spec: N1 -- nothing committed: the region works and reports zeros.
    r = rbln_test_util.run_python(
        "import torch\n"
        "with torch.rbln.explain(with_stack=True) as r:\n"
        "    pass\n"
        "print(r.verdict()); print(r.report().splitlines()[0])\n"
        "print(torch.rbln.is_initialized())\n"
    )
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    assert out[0] == "clean"
    assert out[1].startswith("[clean]  RBLN EXPLAIN   (region wall ")
    assert out[1].endswith("| device mem 0 B peak, 0 B reserved)")
    assert out[2] == "False"


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
