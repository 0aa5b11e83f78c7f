"""torch.compile of a model with identical layers (issue 17 item 3): the
compiler compiles each distinct segment once (a deeper model of the same
layers compiles nothing new), and inspect() / the INFO log say where the
first call's time went, per phase."""
# spec: J1, P9

import sys

import pytest
import torch
import torch._dynamo
from torch import nn

import torch_rbln  # noqa: F401

DEV = "rbln:0"


class Block(nn.Module):
    """Pre-norm attention and GELU MLP with residuals (the shape of a
    decoder layer)."""

    def __init__(self, dim=64, heads=2):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln_2 = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, 4 * dim)
        self.down = nn.Linear(4 * dim, dim)

    def forward(self, x):
        batch, seq, dim = x.shape
        q, k, v = self.qkv(self.ln_1(x)).split(dim, dim=-1)

        def heads(t):
            return t.view(batch, seq, self.heads, -1).transpose(1, 2)

        a = torch.softmax(heads(q) @ heads(k).transpose(-1, -2) * 0.125, dim=-1) @ heads(v)
        x = x + self.proj(a.transpose(1, 2).reshape(batch, seq, dim))
        return x + self.down(torch.nn.functional.gelu(self.up(self.ln_2(x))))


class Stack(nn.Module):
    def __init__(self, layers, vocab=128, dim=64):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(Block(dim) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, ids):
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))


def make_stack(layers):
    torch.manual_seed(layers)
    model = Stack(layers).half().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(0.5)
    return model


def compiled_report(model, ids):
    torch._dynamo.reset()
    compiled = torch.compile(model.to(DEV), backend="rbln", dynamic=False)
    with torch.no_grad():
        out = compiled(ids.to(DEV)).cpu()
    (graph,) = torch.rbln.compiled_programs()
    info = graph.inspect()
    (program,) = info["programs"]
    return out, program["compile_report"], info["compile_phases"]


def test_identical_layers_compile_once_and_match_cpu():
    # spec: P9 -- the 4 layers are one segment compiled once; the result is
    # PyTorch's within float16 tolerance.
    ids = torch.randint(0, 128, (1, 32), generator=torch.Generator().manual_seed(0))
    model = make_stack(4)
    with torch.no_grad():
        expected = model.float()(ids).half()
    out, report, _ = compiled_report(make_stack(4), ids)
    torch.testing.assert_close(out, expected, atol=3e-2, rtol=3e-2)
    assert report["block_repeats"] == 4, report
    assert report["segments"] > report["unique_segments"], report
    assert report["codegen"] == report["unique_segments"], report
    assert report["llvm_codegen_ms"] > 0 and report["mlir_passes_ms"] > 0, report

    # Twice as deep, same layer shapes: every segment is already compiled
    # (the compiler's cache outlives torch._dynamo.reset() only on disk, so
    # compile both in one reset-free run).
    torch._dynamo.reset()
    four = torch.compile(make_stack(4).to(DEV), backend="rbln", dynamic=False)
    eight = torch.compile(make_stack(8).to(DEV), backend="rbln", dynamic=False)
    with torch.no_grad():
        four(ids.to(DEV))
        deep_out = eight(ids.to(DEV)).cpu()
    deep = torch.rbln.compiled_programs()[-1].inspect()["programs"][0]["compile_report"]
    assert deep["block_repeats"] == 8, deep
    assert deep["codegen"] == 0 and deep["memory_hits"] == deep["unique_segments"], deep
    with torch.no_grad():
        deep_expected = make_stack(8).float()(ids).half()
    torch.testing.assert_close(deep_out, deep_expected, atol=3e-2, rtol=3e-2)


def test_first_call_phases_in_inspect_and_log(monkeypatch, capsys):
    # The first call's time per phase: Dynamo capture, aot_autograd, FX->IR,
    # compile (with the compiler's own phases), constants upload, first run.
    monkeypatch.setenv("TORCH_RBLN_LOG_LEVEL", "INFO")
    ids = torch.randint(0, 128, (1, 32), generator=torch.Generator().manual_seed(0))
    _, report, phases = compiled_report(make_stack(2), ids)
    for name in ("dynamo_capture", "aot_autograd", "fx_to_ir", "compile", "first_run"):
        assert phases[name] is not None and phases[name] > 0, phases
    assert phases["compile"] >= report["wall_ms"] * 0.5, (phases, report)
    log = capsys.readouterr().err
    line = next(l for l in log.splitlines() if "first call:" in l)
    for text in ("dynamo capture", "aot autograd", "fx to ir", "compile", "first run",
                 "MLIR passes", "codegen", "segment(s)"):
        assert text in line, line


def test_decomposition_table_built_once_per_operator_set(monkeypatch):
    # spec: J1 -- issue 29 item 4: every graph's compile read PyTorch's core
    # ATen table, which walks all registered operators (~0.3 s); it is built
    # once and reused by the next graph (a generate step's decode graph),
    # and rebuilt when an operator is registered after it.
    from torch_rbln._dynamo import capture

    builds = []
    build = capture._build_decompositions
    monkeypatch.setattr(capture, "_build_decompositions",
                        lambda: builds.append(1) or build())
    monkeypatch.setattr(capture, "_decomposition_cache", None)
    first = capture.decompositions()
    second = capture.decompositions()
    assert len(builds) == 1
    assert first == second and first is not second  # A copy each time.
    assert torch.ops.aten.index_copy.default not in first  # _NATIVE_OPS kept out.
    assert capture.decompositions()[torch.ops.aten.split.Tensor] is capture._split
    lib = torch.library.Library("rbln_decomp_cache_test", "DEF")
    lib.define("twice(Tensor x) -> Tensor")
    capture.decompositions()
    assert len(builds) == 2


def test_cyclic_gc_paused_while_a_graph_compiles(monkeypatch):
    # spec: J1 -- issue 29 item 4: full collections of Python's cyclic GC
    # during aot_autograd and the compile walk every object of the process
    # and free nothing; the collector is off while a graph compiles, back on
    # after, and stays off when the user turned it off.
    import gc

    from torch_rbln._dynamo.compiled_graph import CompiledGraph

    seen = []
    compile_static = CompiledGraph.compile_static
    monkeypatch.setattr(CompiledGraph, "compile_static",
                        lambda self: seen.append(gc.isenabled()) or compile_static(self))
    ids = torch.randint(0, 128, (1, 16), generator=torch.Generator().manual_seed(0))
    model = make_stack(1).to(DEV)
    assert gc.isenabled()
    torch._dynamo.reset()
    with torch.no_grad():
        out = torch.compile(model, backend="rbln", dynamic=False)(ids.to(DEV))
    assert seen == [False] and gc.isenabled()
    with torch.no_grad():
        expected = make_stack(1).float()(ids).half()
    torch.testing.assert_close(out.cpu(), expected, atol=3e-2, rtol=3e-2)
    gc.disable()
    try:
        torch._dynamo.reset()
        with torch.no_grad():
            torch.compile(model, backend="rbln", dynamic=False)(ids[:, :8].to(DEV))
        assert seen == [False, False] and not gc.isenabled()
    finally:
        gc.enable()


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
