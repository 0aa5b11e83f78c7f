"""torch.compile(backend="rbln") fallbacks with a module on the device.

A graph the compiler cannot convert runs on the CPU (the compile_error
fallback), and with options={"host_ops": "unimplemented"} only the op it
lacks does (a host op). Both read parameters and buffers that live on rbln
through CPU copies kept across calls and refreshed when the tensor changes
(its version counter), write in-place updates back to the device, and show
in explain(). The op the compiler lacks is a custom op (rbln_test::twice),
so the tests keep meaning the same as the compiler grows."""
# spec: I2, I3, I6, J6, N3

import sys
import warnings

import pytest
import torch
import torch._dynamo

import torch_rbln  # noqa: F401
from torch_rbln import _dynamo as rbln_dynamo
from rbln_test_util import delta, fresh_dynamo  # noqa: F401 (fixture)

DEV = "rbln:0"


@torch.library.custom_op("rbln_test::twice", mutates_args=())
def twice(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@twice.register_fake
def _(x):
    return torch.empty_like(x)


twice.register_autograd(lambda ctx, grad: grad * 2)


class Block(torch.nn.Module):
    """A linear layer, a custom op the compiler lacks and a buffer the
    forward updates in place (like BatchNorm's running statistics)."""

    def __init__(self, n=64):
        super().__init__()
        self.lin = torch.nn.Linear(n, n, dtype=torch.float16)
        self.register_buffer("calls", torch.zeros(n, dtype=torch.float16))

    def forward(self, x):
        self.calls.add_(1)
        return twice(self.lin(x)) + self.calls


class ScaledByParameter(torch.nn.Module):
    """The custom op reads a parameter directly (a graph input)."""

    def __init__(self, n=64):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.randn(n, n, dtype=torch.float16))

    def forward(self, x):
        return x * twice(self.scale) + 1


# Every test on fresh Dynamo caches (rbln_test_util).
pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def pair(cls):
    torch.manual_seed(0)
    cpu = cls()
    dev = cls()
    dev.load_state_dict(cpu.state_dict())
    return cpu, dev.to(DEV)


def test_default_compile_error_fallback_runs_a_device_module_on_the_cpu():
    # spec: I2, I6 -- default settings, parameters and buffers on rbln: a CPU
    # run with a warning, not an exception; results back on the device.
    cpu, dev = pair(Block)
    f = torch.compile(dev, backend="rbln", dynamic=False)
    x = torch.randn(8, 64, dtype=torch.float16)
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for call in range(3):
            c0 = torch.rbln.counters()
            out = f(x.to(DEV))
            c1 = torch.rbln.counters()
            want = cpu(x)
            assert out.device == torch.device(DEV)
            torch.testing.assert_close(out.cpu(), want)
            # The buffer update reached the device copy.
            assert torch.equal(dev.calls.cpu(), cpu.calls)
            assert delta(c0, c1, "graph/cpu_fallback") == 1 and delta(c0, c1, "graph/runs") == 0
            # lin.weight, lin.bias, calls: downloaded once, then reused (the
            # CPU copy of `calls` is the one the CPU run updated).
            assert delta(c0, c1, "graph/host_copies/downloaded") == (3 if call == 0 else 0)
            assert delta(c0, c1, "graph/host_copies/reused") == (0 if call == 0 else 3)
    mine = [w for w in caught if "compile_error fallback" in str(w.message)]
    assert len(mine) == 1, [str(w.message) for w in caught]
    assert "The following operators are not implemented: ['twice']" in str(mine[0].message)
    ((_, error),) = rbln_dynamo.compile_failures()
    assert isinstance(error, NotImplementedError)


def test_fallback_is_an_explain_signal_and_reads_only_arguments_when_warm():
    # spec: I3, N3 -- a warm fallback call downloads its argument only.
    cpu, dev = pair(Block)
    f = torch.compile(dev, backend="rbln", dynamic=False)
    x = torch.randn(8, 64, dtype=torch.float16)
    xd = x.to(DEV)
    torch.rbln.bind_device_memory(xd)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f(xd)
        with torch.rbln.explain() as r:
            f(xd)
    d = r.to_dict()
    assert d["verdict"] == "overhead"
    signal = d["signals"]["dispatch/cpu_fallback"]
    name = rbln_dynamo.compile_failures()[0][0]
    assert signal["why"] == {f"graph {name}: compile_error": 1}
    assert signal["bytes"] == x.numel() * x.element_size()
    # One host read (x, in sync since the first call: no real d2h); the
    # parameters and the buffer come from the kept CPU copies.
    assert d["runtime"]["v2h"] == {"count": 1, "bytes": x.numel() * x.element_size()}
    assert d["runtime"]["physical_d2h"]["count"] == 0
    (candidate,) = d["optimization_candidates"]
    assert candidate["op"] == f"graph {name}" and "compile_failures()" in candidate["fix"][0]


def test_changed_parameters_are_downloaded_again():
    # The CPU copy follows the parameter's version counter: an optimizer step
    # or an in-place write under no_grad makes the next call read it again.
    cpu, dev = pair(ScaledByParameter)
    f = torch.compile(dev, backend="rbln", dynamic=False)
    x = torch.randn(64, 64, dtype=torch.float16)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f(x.to(DEV))
        for scale in (2.0, -0.5):
            dev.scale.mul_(scale)
            cpu.scale.mul_(scale)
            c0 = torch.rbln.counters()
            out = f(x.to(DEV))
            c1 = torch.rbln.counters()
            torch.testing.assert_close(out.cpu(), cpu(x))
            assert delta(c0, c1, "graph/host_copies/downloaded") == 1
        dev.scale.data = torch.ones(64, 64, dtype=torch.float16, device=DEV)  # new storage
        cpu.scale.data = torch.ones(64, 64, dtype=torch.float16)
        c0 = torch.rbln.counters()
        torch.testing.assert_close(f(x.to(DEV)).cpu(), cpu(x))
        assert delta(c0, torch.rbln.counters(), "graph/host_copies/downloaded") == 1


def test_training_through_the_fallback_reaches_the_device_parameters():
    # Gradients flow through the cached CPU copies back to the rbln
    # parameters, step after step.
    cpu, dev = pair(ScaledByParameter)
    f = torch.compile(dev, backend="rbln", dynamic=False)
    opt_cpu = torch.optim.SGD(cpu.parameters(), lr=0.1)
    opt_dev = torch.optim.SGD(dev.parameters(), lr=0.1)
    x = torch.randn(64, 64, dtype=torch.float16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(2):
            for model, opt, inp in ((cpu, opt_cpu, x), (f, opt_dev, x.to(DEV))):
                opt.zero_grad()
                model(inp).float().square().mean().backward()
                opt.step()
            assert dev.scale.grad.device == torch.device(DEV)
            torch.testing.assert_close(dev.scale.grad.cpu(), cpu.scale.grad, atol=1e-3, rtol=1e-2)
            torch.testing.assert_close(dev.scale.detach().cpu(), cpu.scale.detach(),
                                       atol=1e-3, rtol=1e-2)


def test_in_place_update_of_an_argument_is_written_back():
    def bump(a):
        a.add_(1)
        return twice(a)

    f = torch.compile(bump, backend="rbln", dynamic=False)
    x = torch.randn(16, 64, dtype=torch.float16)
    xd = x.to(DEV)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = f(xd)
    torch.testing.assert_close(xd.cpu(), x + 1)
    torch.testing.assert_close(out.cpu(), (x + 1) * 2)


@torch.library.custom_op("rbln_test::first_present", mutates_args=())
def first_present(xs: list[torch.Tensor | None]) -> torch.Tensor:
    return next(x for x in xs if x is not None) * 2


@first_present.register_fake
def _(xs):
    return torch.empty_like(next(x for x in xs if x is not None))


def test_graph_with_an_op_the_compiler_lacks_falls_back_too():
    # spec: J6 -- a custom op taking a list that mixes tensors and None (as
    # aten.index does) is carried into the graph IR (Tensor?[] inputs plus a
    # presence attribute) but no converter exists: a compile error naming
    # the op, so the fallback runs the graph.
    f = torch.compile(lambda a: first_present([None, a + 1]), backend="rbln", dynamic=False)
    x = torch.randn(8, 64, dtype=torch.float16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = f(x.to(DEV))
    torch.testing.assert_close(out.cpu(), (x + 1) * 2)
    ((_, error),) = rbln_dynamo.compile_failures()
    assert "The following operators are not implemented: ['first_present']" in str(error)


def test_tensors_the_graph_makes_on_the_device_are_made_on_the_cpu():
    # torch.arange(n, device=x.device) and .to(x.device) inside the graph
    # name rbln; the CPU run makes them next to the CPU inputs.
    def positions(x):
        pos = torch.arange(x.shape[-1], device=x.device).to(x.dtype)
        return twice(x + pos.to(x.device))

    f = torch.compile(positions, backend="rbln", dynamic=False)
    x = torch.randn(4, 64, dtype=torch.float16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = f(x.to(DEV))
    assert out.device == torch.device(DEV)
    torch.testing.assert_close(out.cpu(), positions(x))


def test_closed_over_device_tensors_are_read_through_cpu_copies():
    # spec: I2 -- beyond the seed: tensors read from globals or closures are
    # not call arguments either; they are read like parameters.
    w = torch.randn(64, 64, dtype=torch.float16)
    wd = w.to(DEV)
    f = torch.compile(lambda a: twice(a * wd), backend="rbln", dynamic=False)
    x = torch.randn(64, 64, dtype=torch.float16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for call in range(2):
            c0 = torch.rbln.counters()
            torch.testing.assert_close(f(x.to(DEV)).cpu(), (x * w) * 2)
            c1 = torch.rbln.counters()
            assert delta(c0, c1, "graph/host_copies/reused") == call


def test_host_op_reads_parameters_through_cached_copies():
    # spec: J6, N3 -- host_ops="unimplemented": only the custom op runs on
    # the host; its parameter input is read once while unchanged; each call
    # is an explain() signal.
    cpu, dev = pair(ScaledByParameter)
    f = torch.compile(dev, backend="rbln", dynamic=False, options={"host_ops": "unimplemented"})
    x = torch.randn(64, 64, dtype=torch.float16)
    with torch.no_grad():
        for call in range(3):
            if call == 2:
                dev.scale.mul_(-1)
                cpu.scale.mul_(-1)
            c0 = torch.rbln.counters()
            with torch.rbln.explain() as r:
                out = f(x.to(DEV))
            c1 = torch.rbln.counters()
            torch.testing.assert_close(out.cpu(), cpu(x))
            assert delta(c0, c1, "graph/host_ops") == 1 and delta(c0, c1, "graph/cpu_fallback") == 0
            assert delta(c0, c1, "graph/host_copies/downloaded") == (0 if call == 1 else 1)
            signal = r.to_dict()["signals"]["dispatch/cpu_fallback"]
            assert signal["why"] == {"twice: host_op": 1}
            assert signal["bytes"] == (0 if call == 1 else 64 * 64 * 2)
    (graph,) = torch.rbln.compiled_programs()
    (host,) = graph.inspect()["host_ops"]
    assert host["op"] == "twice" and host["calls"] == 3


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
