"""torch.compile(backend="rbln"): whole graphs as one program."""
# spec: J1, J2, J3, J5, J6, J7, I2, H5, P9, E2

import logging
import sys

import pytest
import torch
import torch._dynamo

import torch_rbln  # noqa: F401
from torch_rbln import _dynamo as rbln_dynamo
from rbln_test_util import delta, fresh_dynamo  # noqa: F401 (fixture)

DEV = "rbln:0"


def graph_counters():
    return {k: v for k, v in torch.rbln.counters().items() if k.startswith(("graph/", "runtime/dma"))}


# Every test on fresh Dynamo caches (rbln_test_util).
pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def compute(x, y):
    return torch.relu(x + y)


def test_compile_reuse_recompile_on_new_shape():
    # spec: J3, J1 -- one program for the graph, reused, recompiled per shape.
    x = torch.randn(128, 128, dtype=torch.float16)
    y = torch.randn_like(x)
    xd, yd = x.to(DEV), y.to(DEV)
    f = torch.compile(compute, backend="rbln", dynamic=False)
    c0 = graph_counters()
    with torch.inference_mode():
        first = f(xd, yd)
        c1 = graph_counters()
        second = f(xd, yd)
        c2 = graph_counters()
        sx = torch.randn(64, 128, dtype=torch.float16)
        sy = torch.randn_like(sx)
        small = f(sx.to(DEV), sy.to(DEV))
        c3 = graph_counters()
    assert delta(c0, c1, "graph/compiles") == 1 and delta(c0, c1, "graph/runs") == 1
    assert delta(c1, c2, "graph/compiles") == 0 and delta(c1, c2, "graph/runs") == 1
    assert delta(c2, c3, "graph/compiles") == 1
    assert first.device == torch.device(DEV) and small.shape == (64, 128)
    torch.testing.assert_close(first.cpu(), torch.relu(x + y))
    torch.testing.assert_close(second.cpu(), torch.relu(x + y))
    torch.testing.assert_close(small.cpu(), torch.relu(sx + sy))
    # The whole graph is one program with both ops.
    progs = torch.rbln.compiled_programs()
    assert [p.inspect()["programs"][0]["ops"] for p in progs] == [{"add": 1, "relu": 1}] * 2


def test_graph_outputs_stay_on_device_and_feed_the_next_graph():
    # spec: J7 -- device-latest inputs cost nothing; outputs feed the next graph.
    x = torch.randn(128, 128, dtype=torch.float16)
    f = torch.compile(compute, backend="rbln", dynamic=False)
    g = torch.compile(lambda a: a * 2.0, backend="rbln", dynamic=False)
    xd = x.to(DEV)
    with torch.inference_mode():
        g(f(xd, xd))  # Warm-up: compiles, uploads the host-latest input once.
        before = graph_counters()
        out = g(f(xd, xd))
        after = graph_counters()
    assert torch.rbln._storage_info(out)["state"] == "device-latest"
    for key in ("runtime/dma_h2d_copies", "runtime/dma_d2h_copies", "runtime/dma_d2d_copies"):
        assert delta(before, after, key) == 0, key
    assert delta(before, after, "graph/runs") == 2
    torch.testing.assert_close(out.cpu(), torch.relu(x + x) * 2.0)


def test_graphs_ignore_the_eager_alignment_rules():
    # spec: H5 -- a last dim of 3 falls back in eager but not inside a graph.
    x = torch.randn(5, 3, dtype=torch.float16)
    f = torch.compile(compute, backend="rbln", dynamic=False)
    f(x.to(DEV), x.to(DEV))
    before = torch.rbln.counters()
    out = f(x.to(DEV), x.to(DEV))
    after = torch.rbln.counters()
    torch.testing.assert_close(out.cpu(), torch.relu(x + x))
    assert delta(before, after, "graph/runs") == 1
    assert not [k for k in after if "fallback" in k and delta(before, after, k)]


def test_training_forward_compiles_and_gradients_match():
    # spec: J1 -- aot_autograd: the forward graph is a program; weights the
    # backward needs are returned as themselves, not copied.
    cpu = ScaleShift(128)
    dev = ScaleShift(128).to(DEV)
    dev.load_state_dict(cpu.state_dict())
    x = torch.randn(64, 128, dtype=torch.float16)
    loss = torch.compile(dev, backend="rbln", dynamic=False)(x.to(DEV)).float().sum()
    loss.backward()
    cpu(x).float().sum().backward()
    torch.testing.assert_close(dev.scale.grad.cpu(), cpu.scale.grad, atol=1e-2, rtol=1e-2)
    (fw,) = [g for g in torch.rbln.compiled_programs() if g.name.endswith("_forward")]
    assert fw.inspect()["programs"][0]["ops"]["relu"] == 1


class ScaleShift(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.randn(n, dtype=torch.float16))
        self.register_buffer("shift", torch.randn(n, dtype=torch.float16))

    def forward(self, x):
        return torch.relu(x * self.scale + self.shift)


def test_parameters_and_buffers_are_runtime_inputs():
    # spec: P9 -- weights are program inputs: equal shapes share one program,
    # and new weight values need no recompile.
    a, b = ScaleShift(128), ScaleShift(128)
    x = torch.randn(64, 128, dtype=torch.float16)
    ad, bd = ScaleShift(128).to(DEV), ScaleShift(128).to(DEV)
    ad.load_state_dict(a.state_dict())
    bd.load_state_dict(b.state_dict())
    fa = torch.compile(ad, backend="rbln", dynamic=False)
    fb = torch.compile(bd, backend="rbln", dynamic=False)
    with torch.inference_mode():
        ra = fa(x.to(DEV))
        c1 = torch.rbln.counters()
        rb = fb(x.to(DEV))
        c2 = torch.rbln.counters()
        with torch.no_grad():
            bd.scale.mul_(2)
        rb2 = fb(x.to(DEV))
        c3 = torch.rbln.counters()
    torch.testing.assert_close(ra.cpu(), a(x).detach())
    torch.testing.assert_close(rb.cpu(), b(x).detach())
    with torch.no_grad():
        b.scale.mul_(2)
    torch.testing.assert_close(rb2.cpu(), b(x).detach())
    # The second module reuses the first one's program; new values: no compile.
    assert delta(c1, c2, "graph/compiles") == 0
    assert delta(c2, c3, "graph/compiles") == 0 and delta(c2, c3, "graph/runs") == 1
    prog = torch.rbln.compiled_programs()[0].inspect()["programs"][0]
    assert len(prog["input_specs"]) == 3  # x, scale, shift


def test_unconvertible_graph_runs_on_cpu_with_arguments_moved():
    # spec: I2, J6 -- a compile failure runs the whole graph on the CPU.
    # special.airy_ai is not converted by the compiler.
    x = torch.rand(64, 64, dtype=torch.float32)
    f = torch.compile(lambda a: torch.special.airy_ai(a * 0.5) + 1.0, backend="rbln",
                      dynamic=False)
    before = graph_counters()
    out = f(x.to(DEV))
    after = graph_counters()
    assert out.device == torch.device(DEV)
    torch.testing.assert_close(out.cpu(), torch.special.airy_ai(x * 0.5) + 1.0)
    assert delta(before, after, "graph/cpu_fallback") == 1
    assert delta(before, after, "graph/compile_errors") == 1
    assert delta(before, after, "graph/runs") == 0


def times_x_rows(x):
    return torch.relu(x * x.shape[0])


def test_dynamic_shapes_fail_on_second_shape_and_fall_back():
    # spec: J2 -- the first shape compiles; the second needs sizes at run
    # time, fails with the J2 message and the graph runs on the CPU.
    c = torch.compile(times_x_rows, backend="rbln", dynamic=True)
    a = torch.randn(128, 64, dtype=torch.float16)
    b = torch.randn(96, 64, dtype=torch.float16)
    c0 = graph_counters()
    ra = c(a.to(DEV))
    c1 = graph_counters()
    rb = c(b.to(DEV))
    c2 = graph_counters()
    assert torch.equal(ra.cpu(), times_x_rows(a)) and torch.equal(rb.cpu(), times_x_rows(b))
    assert delta(c0, c1, "graph/runs") == 1 and delta(c0, c1, "graph/cpu_fallback") == 0
    assert delta(c1, c2, "graph/runs") == 0 and delta(c1, c2, "graph/cpu_fallback") == 1
    assert rb.device == torch.device(DEV)


def attention_step(emb, w_qkv, w_o, cache, ids, last):
    """A transformer step over a row of tokens that computes with its sizes
    (view/reshape by x.shape[0]) and writes its keys into a cache in place,
    as a server's bucketed step does."""
    x = emb.index_select(0, ids)
    x = x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).half()
    q, k, v = (x @ w_qkv).view(x.shape[0], 3, 4, 32).unbind(1)
    cache.index_copy_(0, ids, k.reshape(x.shape[0], 128))
    scores = (q.transpose(0, 1) @ k.transpose(0, 1).transpose(1, 2)).float() / 5.65
    att = torch.softmax(scores, -1).half()
    o = (att @ v.transpose(0, 1)).transpose(0, 1).reshape(x.shape[0], 128)
    return (o @ w_o).index_select(0, last).float()


def test_compile_per_shape_compiles_each_bucket_from_one_capture():
    # spec: J2, J3, P4 -- options={"compile_per_shape": True}: a graph
    # captured with symbolic sizes (maybe_mark_dynamic) compiles one static
    # program per concrete shape, also when it computes with sizes; the
    # programs are the ones dynamic=False compiles (same ops, dtypes, shapes,
    # the cache written in place) and give the same bits; one Dynamo capture
    # instead of one per shape.
    torch.manual_seed(0)
    weights = [(torch.randn(*s) * 0.1).half().to(DEV) for s in ((512, 128), (128, 384), (128, 128))]
    shapes = ((4, 2), (8, 4), (16, 4))
    calls = []
    for tokens, rows in shapes:
        ids = torch.randint(0, 512, (tokens,)).to(DEV)
        calls.append((ids, torch.arange(rows).to(DEV)))

    def ops(graph):
        return sorted(
            (tuple((n[0], [o[1:] for o in n[2]], sorted(n[3].items())) for n in ir.nodes),
             len(ir.updates), len(ir.write_backs)) for ir, _ in graph._programs.values())

    def cache():
        return torch.zeros(512, 128, dtype=torch.float16, device=DEV)

    with torch.inference_mode():
        static = torch.compile(attention_step, backend="rbln", dynamic=False, fullgraph=True)
        static_caches = [cache() for _ in calls]
        expected = [static(*weights, kv, *c).cpu() for kv, c in zip(static_caches, calls)]
        static_ops = sorted(op for g in rbln_dynamo.compiled_programs() for op in ops(g))
        torch._dynamo.reset()
        per_shape = torch.compile(attention_step, backend="rbln", dynamic=False, fullgraph=True,
                                  options={"compile_per_shape": True})
        c0 = graph_counters()
        got, caches = [], [cache() for _ in calls]
        for kv, (ids, last) in zip(caches, calls):
            torch._dynamo.maybe_mark_dynamic(ids, 0)
            torch._dynamo.maybe_mark_dynamic(last, 0)
            got.append(per_shape(*weights, kv, ids, last).cpu())
        c1 = graph_counters()
    (graph,) = rbln_dynamo.compiled_programs()
    assert graph.inspect()["dynamic"] and len(graph._programs) == len(shapes)
    assert ops(graph) == static_ops and all(n == 1 for _, n, _ in static_ops)
    assert all(torch.equal(g, e) for g, e in zip(got, expected))
    assert all(torch.equal(a.cpu(), b.cpu()) for a, b in zip(caches, static_caches))
    assert delta(c0, c1, "graph/runs") == len(shapes) and delta(c0, c1, "graph/cpu_fallback") == 0


def write_one_view_read_both(a, b, ids, w):
    a.index_copy_(0, ids, (w.index_select(0, ids) * 2).view(ids.shape[0], 128))
    return b.index_select(0, ids).float() + a.index_select(0, ids).float()


def test_compile_per_shape_sees_inputs_that_share_a_storage():
    # spec: J2, P4 -- two inputs viewing one cache: writing one in place
    # would change the other, so the program writes it back after the run;
    # per shape as with dynamic=False (the sizes are bound into values that
    # share a storage again), results and the cache as on the CPU.
    def run(options, mark):
        torch._dynamo.reset()
        f = torch.compile(write_one_view_read_both, backend="rbln", dynamic=False,
                          fullgraph=True, options=options)
        results = []
        for tokens in (4, 8):
            torch.manual_seed(tokens)
            w = torch.randn(64, 128).half()
            cache = torch.zeros(2, 64, 128, dtype=torch.float16)
            ids = torch.arange(tokens)
            expected = write_one_view_read_both(cache[0], cache[1], ids, w)
            expected_cache = cache.clone()
            dcache, dids = cache.zero_().to(DEV), ids.to(DEV)
            if mark:
                torch._dynamo.maybe_mark_dynamic(dids, 0)
            out = f(dcache[0], dcache[1], dids, w.to(DEV))
            assert torch.equal(out.cpu(), expected) and torch.equal(dcache.cpu(), expected_cache)
            results.append(dcache.cpu())
        programs = [ir for g in rbln_dynamo.compiled_programs() for ir, _ in g._programs.values()]
        return results, [(len(ir.updates), len(ir.write_backs)) for ir in programs]

    with torch.inference_mode():
        static, static_programs = run({}, False)
        per_shape, per_shape_programs = run({"compile_per_shape": True}, True)
    assert static_programs == per_shape_programs == [(0, 1), (0, 1)]
    assert all(torch.equal(a, b) for a, b in zip(static, per_shape))


def sort_then_number(x):
    # Sizes of intermediates (aten.sym_numel / sym_size nodes in the traced
    # graph, arithmetic on them), as an MoE layer's routing computes them.
    values, perm = torch.sort(x.reshape(-1))
    half = perm.numel() // 2
    return values[:half] + torch.arange(half, device=x.device), perm.view(x.shape[0], -1)


def test_compile_per_shape_binds_sizes_of_intermediates():
    # spec: J2, J3 -- with compile_per_shape the sizes a graph queries of its
    # intermediates become this shape's constants.
    f = torch.compile(sort_then_number, backend="rbln", dynamic=False, fullgraph=True,
                      options={"compile_per_shape": True})
    with torch.inference_mode():
        for rows in (4, 6, 8):
            x = torch.randn(rows, 3)
            dx = x.to(DEV)
            torch._dynamo.maybe_mark_dynamic(dx, 0)
            for got, want in zip(f(dx), sort_then_number(x)):
                assert torch.equal(got.cpu(), want)
    (graph,) = rbln_dynamo.compiled_programs()
    assert graph.inspect()["dynamic"] and len(graph._programs) == 3


def test_recompile_limit_message_suggests_padding_or_bucketing():
    # spec: J2
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    logger = logging.getLogger("torch._dynamo.convert_frame")
    handler = Keep()
    logger.addHandler(handler)
    try:
        with torch._dynamo.config.patch(recompile_limit=2):
            f = torch.compile(lambda a: a + a, backend="rbln", dynamic=False)
            for n in (64, 128, 192):
                out = f(torch.ones(n, 64, dtype=torch.float16, device=DEV))
    finally:
        logger.removeHandler(handler)
    assert out.shape == (192, 64)
    (hit,) = [m for m in records if "hit config.recompile_limit" in m]
    assert "pad inputs or bucket them" in hit


def test_options_compile_only_and_errors():
    # spec: J5
    x = torch.randn(128, 128, dtype=torch.float16, device=DEV)
    f = torch.compile(compute, backend="rbln", dynamic=False, options={"mode": "compile_only"})
    before = graph_counters()
    out = f(x, x)
    after = graph_counters()
    assert out.device.type == "meta" and out.shape == (128, 128) and out.dtype == torch.float16
    assert delta(before, after, "graph/compiles") == 1 and delta(before, after, "graph/runs") == 0
    profile = torch.rbln.get_device_profile()["name"]
    ok = torch.compile(compute, backend="rbln", options={"npu": profile, "num_devices": 1})
    torch.testing.assert_close(ok(x, x).cpu(), torch.relu(x.cpu() * 2))
    bad = [
        ({"npu": "no-such-npu"}, f"does not match the device, which is a '{profile}' NPU"),
        ({"mode": "fast"}, "option mode='fast' is not one of"),
        ({"colour": 1}, r"unknown option\(s\) \['colour'\]"),
        ({"num_devices": 64}, "option num_devices=64 but rbln:0 groups"),
        ({"cache_dir": __file__ + "/sub"}, "cannot create the directory"),
        ({"cache_dir": 7}, "option cache_dir=7 must be a directory path"),
        ({"compile_per_shape": "yes"}, "option compile_per_shape='yes' must be True or False"),
    ]
    for options, message in bad:
        torch._dynamo.reset()
        g = torch.compile(compute, backend="rbln", options=options)
        with pytest.raises(Exception, match=message):
            g(x, x)


def test_dynamo_reset_clears_programs_and_frees_constant_buffers():
    # spec: J5, E2, E4 -- a cached program's constants are device memory the
    # cache holds: reserved (program_bytes), not allocated/active; reset frees them.
    def with_constant(a):
        return a + torch.ones(512, 512, dtype=a.dtype, device=a.device).tril()

    x = torch.randn(512, 512, dtype=torch.float16, device=DEV)
    torch.rbln.bind_device_memory(x)
    const_bytes = 512 * 512 * 2
    s0 = torch.rbln.memory_stats(DEV)
    f = torch.compile(with_constant, backend="rbln", dynamic=False)
    out = f(x)
    torch.testing.assert_close(out.cpu(), with_constant(x.cpu()))
    (graph,) = torch.rbln.compiled_programs()
    report = graph.inspect()
    assert report["programs"][0]["ops"] == {"add": 1} and report["host_ops"] == []
    assert sum(report["device_bytes_per_chiplet"].values()) >= 2 * const_bytes
    held_by_program = sum(v["constants"] for v in report["device_buffers_per_chiplet"].values())
    assert held_by_program >= const_bytes
    del out
    torch.rbln.synchronize()
    s1 = torch.rbln.memory_stats(DEV)
    # Only the constant stayed, and it is the program's, not the user's.
    assert s1["allocated_bytes.all.current"] == s0["allocated_bytes.all.current"]
    assert s1["active_bytes.all.current"] == s0["active_bytes.all.current"]
    assert s1["program_bytes.all.current"] - s0["program_bytes.all.current"] == held_by_program
    assert s1["reserved_bytes.all.current"] >= (s1["allocated_bytes.all.current"]
                                                + s1["program_bytes.all.current"])
    assert torch.rbln.memory_allocated(DEV) == s0["allocated_bytes.all.current"]
    torch._dynamo.reset()
    s2 = torch.rbln.memory_stats(DEV)
    assert torch.rbln.compiled_programs() == []
    assert s2["program_bytes.all.current"] == s0["program_bytes.all.current"]
    assert s2["allocated_bytes.all.current"] == s0["allocated_bytes.all.current"]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
