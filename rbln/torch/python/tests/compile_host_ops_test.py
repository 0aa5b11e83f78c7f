"""torch.compile(backend="rbln"): host ops inside the compiled artifact."""
# spec: J6, J5, J7, E5

import sys

import pytest
import torch
import torch._dynamo

import torch_rbln  # noqa: F401
from torch_rbln import _dynamo as rbln_dynamo
from rbln_test_util import delta

DEV = "rbln:0"


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    # Dynamo graph-breaks on data-dependent output shapes unless told to
    # capture them; then they reach the backend, which makes them host ops.
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
        yield
    torch._dynamo.reset()


def counters():
    return torch.rbln.counters()


def nonzero_in_the_middle(x):
    y = torch.relu(x * 2 - 1)
    idx = torch.nonzero(y)  # host op: its row count depends on the data
    rows = idx[:, 0].to(x.dtype)
    return y + 1, rows * 3 + 1


def test_nonzero_in_the_middle_is_a_host_op_and_the_rest_runs_on_the_device():
    # spec: J6, J7
    f = torch.compile(nonzero_in_the_middle, backend="rbln", dynamic=False)
    for seed in (0, 1):
        torch.manual_seed(seed)
        x = torch.randn(32, 16, dtype=torch.float16)
        xd = x.to(DEV)
        c0 = counters()
        a, b = f(xd)
        c1 = counters()
        ra, rb = nonzero_in_the_middle(x)
        assert a.device == torch.device(DEV) and b.device == torch.device(DEV)
        assert torch.equal(a.cpu(), ra) and torch.equal(b.cpu(), rb)
        # Two device programs ran, one host op; nothing fell back to the CPU.
        assert delta(c0, c1, "graph/runs") == 2
        assert delta(c0, c1, "graph/host_ops") == 1
        assert delta(c0, c1, "graph/cpu_fallback") == 0
    assert rbln_dynamo.compile_failures() == []
    (graph,) = torch.rbln.compiled_programs()
    report = graph.inspect()
    (host,) = report["host_ops"]
    assert host["op"] == "nonzero" and host["host_op_reason"] == "data-dependent output shape"
    assert host["calls"] == 2
    assert [s["kind"] for s in report["segments"]] == ["device", "host", "device"]
    # Segment 0 is one program; segment 1 is compiled per nonzero count.
    seg0 = [p for p in report["programs"] if p["segment"] == 0]
    assert len(seg0) == 1 and seg0[0]["ops"] == {"mul": 1, "sub": 1, "relu": 1, "add": 1}
    seg1 = [p for p in report["programs"] if p["segment"] == 1]
    assert 1 <= len(seg1) <= 2 and all(p["input_specs"][0][0] == "int64" for p in seg1)
    assert report["ops"]["nonzero"] == 1 and report["ops"]["relu"] == 1
    # Every chiplet of the profile is listed, with the bytes of the outputs.
    chiplets = torch.rbln.get_device_profile()["chiplets_per_npu"]
    assert len(report["device_buffers_per_chiplet"]) == chiplets
    assert sum(v["outputs"] for v in report["device_buffers_per_chiplet"].values()) > 0


def test_host_op_transfers_show_in_explain():
    # spec: J6, N2 -- the host op downloads its input (a physical d2h of the
    # first program's output) and the next program's input is uploaded.
    f = torch.compile(nonzero_in_the_middle, backend="rbln", dynamic=False)
    x = torch.randn(32, 16, dtype=torch.float16)
    xd = x.to(DEV)
    torch.rbln.bind_device_memory(xd)
    f(xd)  # Compiles; the second call runs the cached programs.
    copies = ("storage/d2d_same_chiplet_copies", "storage/d2d_cross_chiplet_copies")
    before = torch_rbln._C._counters()
    with torch.rbln.explain() as r:
        a, b = f(xd)
    after = torch_rbln._C._counters()
    rt = r.to_dict()["runtime"]
    assert rt["physical_d2h"]["count"] >= 1
    assert rt["physical_d2h"]["bytes"] >= 32 * 16 * 2  # relu's result, for nonzero
    assert rt["push"]["count"] >= 1  # nonzero's indices, uploaded for segment 1
    # The upload is a plain upload: nonzero's (column-major) indices are laid
    # out contiguously on the host, so no device copy makes them contiguous
    # on the device (no runtime/v2v_slow).
    assert "runtime/v2v_slow" not in r.to_dict()["signals"], r.report()
    assert all(after.get(k, 0) == before.get(k, 0) for k in copies), r.report()
    torch.testing.assert_close(b.cpu(), nonzero_in_the_middle(x)[1])


def test_boolean_mask_and_masked_select_are_host_ops():
    # spec: J6
    def masked(x, m):
        picked = x[m]  # index.Tensor with a bool mask
        sel = torch.masked_select(x, torch.logical_not(m))
        return picked * 2, sel.sum() + 1

    x = torch.randn(8, 8, dtype=torch.float32)
    m = x > 0.25
    f = torch.compile(masked, backend="rbln", dynamic=False)
    got = f(x.to(DEV), m.to(DEV))
    want = masked(x, m)
    torch.testing.assert_close(got[0].cpu(), want[0])
    torch.testing.assert_close(got[1].cpu(), want[1])
    (graph,) = torch.rbln.compiled_programs()
    reasons = {h["op"]: h["host_op_reason"] for h in graph.inspect()["host_ops"]}
    assert reasons == {"index": "data-dependent output shape",
                       "masked_select": "data-dependent output shape"}


def test_unimplemented_ops_become_host_ops_when_asked():
    # spec: J6, J5 -- options={"host_ops": "unimplemented"}: `airy_ai` (which
    # the compiler does not convert) runs on the host between device programs.
    def g(x):
        return torch.special.airy_ai(x * 2) + 1

    x = torch.randn(64, 64, dtype=torch.float32)
    f = torch.compile(g, backend="rbln", dynamic=False, options={"host_ops": "unimplemented"})
    c0 = counters()
    out = f(x.to(DEV))
    c1 = counters()
    torch.testing.assert_close(out.cpu(), g(x), atol=2e-3, rtol=2e-3)
    assert delta(c0, c1, "graph/runs") == 2 and delta(c0, c1, "graph/cpu_fallback") == 0
    (graph,) = torch.rbln.compiled_programs()
    (host,) = graph.inspect()["host_ops"]
    assert host["op"] == "special_airy_ai"
    assert host["host_op_reason"] == "not implemented by the rbln compiler: special_airy_ai"


def test_compile_only_builds_segments_around_static_host_ops():
    # spec: J5, J6 -- mode="compile_only" runs host ops on meta tensors to
    # size the next segment; a data-dependent one cannot be sized: clear error.
    def g(x):
        return torch.special.airy_ai(x * 2) + 1

    x = torch.randn(64, 64, dtype=torch.float32, device=DEV)
    f = torch.compile(g, backend="rbln", dynamic=False,
                      options={"host_ops": "unimplemented", "mode": "compile_only"})
    c0 = counters()
    out = f(x)
    c1 = counters()
    assert out.device.type == "meta" and out.shape == (64, 64)
    assert delta(c0, c1, "graph/compiles") == 2 and delta(c0, c1, "graph/runs") == 0
    assert delta(c0, c1, "graph/host_ops") == 0
    torch._dynamo.reset()
    h = torch.compile(nonzero_in_the_middle, backend="rbln", dynamic=False,
                      options={"mode": "compile_only"})
    with pytest.raises(RuntimeError, match="mode='compile_only' cannot build the segments "
                                           "after host op nonzero"):
        h(torch.randn(32, 16, dtype=torch.float16, device=DEV))


def test_unimplemented_ops_fail_the_compile_by_default():
    # spec: J6 -- without host_ops="unimplemented" the frontend's
    # NotImplementedError makes the whole graph run on the CPU.
    f = torch.compile(lambda a: torch.special.airy_ai(a) + 1, backend="rbln", dynamic=False)
    x = torch.randn(16, 16, dtype=torch.float32)
    c0 = counters()
    out = f(x.to(DEV))
    c1 = counters()
    torch.testing.assert_close(out.cpu(), torch.special.airy_ai(x) + 1)
    assert delta(c0, c1, "graph/cpu_fallback") == 1 and delta(c0, c1, "graph/host_ops") == 0
    ((_, error),) = rbln_dynamo.compile_failures()
    assert isinstance(error, NotImplementedError)
    assert "The following operators are not implemented: ['special_airy_ai']" in str(error)


def test_disabled_host_ops_fail_with_the_not_implemented_error():
    # spec: J6, J5 -- host_ops="none": the data-dependent op fails the compile.
    f = torch.compile(nonzero_in_the_middle, backend="rbln", dynamic=False,
                      options={"host_ops": False})
    x = torch.randn(32, 16, dtype=torch.float16)
    c0 = counters()
    a, b = f(x.to(DEV))
    c1 = counters()
    assert torch.equal(b.cpu(), nonzero_in_the_middle(x)[1])
    assert delta(c0, c1, "graph/cpu_fallback") == 1 and delta(c0, c1, "graph/runs") == 0
    ((_, error),) = rbln_dynamo.compile_failures()
    assert isinstance(error, NotImplementedError)
    assert str(error).startswith("The following operators are not implemented: ['nonzero']")
    with pytest.raises(Exception, match="option host_ops='sometimes' is not one of"):
        torch.compile(nonzero_in_the_middle, backend="rbln",
                      options={"host_ops": "sometimes"})(x.to(DEV))


def dropped(x):
    y = torch.nn.functional.dropout(x.sin(), 0.3, training=True)
    return y * 2 + 1, torch.rand_like(x) + x


def test_random_ops_are_host_ops_that_draw_from_the_rbln_generator():
    # spec: J6 -- device programs have no generator: dropout's native_dropout
    # and rand_like run as the eager rbln ops on the device tensors, so after
    # the same torch.rbln.manual_seed a compiled call draws what an eager
    # call draws (the masks, the uniform numbers), and the rest runs on the
    # device.
    x = torch.randn(64, 33).to(DEV)
    torch.rbln.manual_seed(5)
    eager = [t.cpu() for t in dropped(x)]
    f = torch.compile(dropped, backend="rbln", dynamic=False)
    torch.rbln.manual_seed(5)
    c0 = counters()
    got = [t.cpu() for t in f(x)]
    c1 = counters()
    assert delta(c0, c1, "graph/cpu_fallback") == 0
    assert delta(c0, c1, "graph/host_ops") == 2
    assert torch.equal(got[0] == 1, eager[0] == 1)  # the same dropout mask
    assert 0.2 < (got[0] == 1).float().mean() < 0.4
    torch.testing.assert_close(got[0], eager[0])
    torch.testing.assert_close(got[1], eager[1])
    (info,) = [g.inspect() for g in torch.rbln.compiled_programs()[-1:]]
    reasons = {h["op"]: h["host_op_reason"] for h in info["host_ops"]}
    assert set(reasons) == {"native_dropout", "rand_like"}, reasons
    assert all("device's generator" in r for r in reasons.values())
    # The next call draws new numbers, as eager does.
    assert not torch.equal(f(x)[0].cpu() == 1, got[0] == 1)
    # Ops random only through dropout draw nothing without it: sdpa's flash
    # op (tagged nondeterministic_seeded for its dropout_p) stays on the
    # device.
    q = torch.randn(1, 2, 8, 16).to(DEV)
    sdpa = torch.compile(torch.nn.functional.scaled_dot_product_attention, backend="rbln",
                         dynamic=False)
    c0 = counters()
    with torch.no_grad():
        sdpa(q, q, q)
    assert delta(c0, counters(), "graph/host_ops") == 0
    # host_ops="none": the random op fails the compile, saying why.
    torch._dynamo.reset()
    g = torch.compile(dropped, backend="rbln", dynamic=False, options={"host_ops": "none"})
    g(x)
    ((_, error),) = rbln_dynamo.compile_failures()
    assert "random numbers have no device generator" in str(error), error


def test_float64_ops_are_host_ops():
    # spec: J6 -- x * t.item() with captured scalar outputs: Dynamo keeps the
    # scalar as a float64 tensor, which the device cannot hold; the float64
    # round trip runs on the host, the rest on the device.
    def scaled(x):
        s = (x.abs().amax() * 4).item()
        return x * s

    x = torch.randn(16, 16, dtype=torch.float32)
    with torch._dynamo.config.patch(capture_scalar_outputs=True):
        f = torch.compile(scaled, backend="rbln", dynamic=False)
        c0 = counters()
        out = f(x.to(DEV))
        c1 = counters()
    torch.testing.assert_close(out.cpu(), scaled(x))
    assert delta(c0, c1, "graph/cpu_fallback") == 0 and delta(c0, c1, "graph/runs") == 2
    (graph,) = torch.rbln.compiled_programs()
    reasons = {h["host_op_reason"] for h in graph.inspect()["host_ops"]}
    assert reasons == {"dtype float64 has no rbln device representation"}


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
