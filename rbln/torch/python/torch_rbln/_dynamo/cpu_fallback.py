"""The compile_error fallback (SPEC I2, J4, J6): what the backend hands
Dynamo is a CompiledFunction, which runs the compiled graph or, after a
compile failure, the whole Dynamo graph on the CPU; and the record of those
failures (compile_failures())."""

import threading
import warnings

import torch

from .. import _C
from . import host_copies as _host_copies

DYNAMIC_SHAPE_MESSAGE = "Dynamic shape not supported for rbln backend"


class CompileFailure(RuntimeError):
    """A failure the compile_error fallback may turn into a CPU run."""

    def __init__(self, error: BaseException):
        super().__init__(str(error))
        self.error = error

_lock = threading.Lock()
# (graph name, exception) of every compile failure since the last reset.
_compile_failures = []


def _record_failure(name, error):
    with _lock:
        _compile_failures.append((name, error))


def compile_failures():
    """(graph name, exception) of each compile failure since the last
    torch._dynamo.reset(): what made a graph run on the CPU."""
    with _lock:
        return list(_compile_failures)

def clear_compile_failures():
    with _lock:
        _compile_failures.clear()


def _is_call_argument(node) -> bool:
    """True for placeholders fed by the compiled function's own arguments
    (not module parameters/buffers or tensors read from globals/closures)."""
    grapharg = node.meta.get("grapharg")
    source = getattr(grapharg, "source", None)
    if source is None:
        return True
    from torch._dynamo.source import AttrSource, LocalSource

    while True:
        if isinstance(source, AttrSource):
            return False  # self.weight, module._parameters[...], obj.attr
        base = getattr(source, "base", None)
        if base is None:
            break
        source = base
    if not isinstance(source, LocalSource):
        return False  # globals, closures
    return bool(getattr(source, "is_input", True)) and source.local_name != "self"

def _source_name(node) -> str:
    source = getattr(node.meta.get("grapharg"), "source", None)
    name = getattr(source, "name", None) or node.name
    return name() if callable(name) else name


class CompiledFunction:
    """What the backend returns to Dynamo: the compiled graph, or the whole
    Dynamo graph on the CPU after a compile failure (SPEC I2, J4, J6)."""

    def __init__(self, gm, name, compiled, failure=None):
        self.gm = gm
        self.name = name
        self.compiled = compiled
        self.failure = failure
        if failure is not None:
            _record_failure(name, failure)
        self.placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        self.call_argument = [_is_call_argument(n) for n in self.placeholders]
        # Dynamo drops node.meta["grapharg"] after compiling; keep the names.
        self.source_names = [_source_name(n) for n in self.placeholders]
        # CPU copies of the graph's other inputs (parameters, buffers,
        # globals) for CPU runs, kept across calls (host_copies.py).
        self.host_copies = _host_copies.HostCopies()
        self._cpu_gm = None  # The graph with its rbln devices on the CPU.
        self._warned = False

    def __call__(self, *args):
        if self.failure is None:
            try:
                return self.compiled(*args)
            except CompileFailure as e:
                _record_failure(self.name, e.error)
                if DYNAMIC_SHAPE_MESSAGE not in str(e):
                    self.failure = e.error  # Permanent: later calls skip the attempt.
                return self._run_on_cpu(args, e.error)
        return self._run_on_cpu(args, self.failure)

    def _run_on_cpu(self, args, error):
        """The compile_error fallback: the Dynamo graph on the CPU. The call's
        rbln arguments are downloaded every call; the other rbln inputs
        (parameters, buffers, tensors read from globals or closures) through
        CPU copies kept while they are unchanged. Inputs the graph mutates
        are written back to the device; results go to the inputs' device."""
        detail = f"{type(error).__name__}: {error}"
        nbytes = sum(
            (a.numel() * a.element_size() if isinstance(a, torch.Tensor) and a.device.type == "rbln"
             else 0) if is_arg else self.host_copies.bytes_to_read(i, a)
            for i, (a, is_arg) in enumerate(zip(args, self.call_argument)))
        try:
            _C._graph_compile_error(f"graph {self.name}", detail, nbytes)
        except RuntimeError as policy:
            raise type(error)(f"{error}\n{policy}") from None
        self._warn_once(detail)
        devices = {}  # is_arg -> the first rbln device among those inputs
        moved = []
        for i, (a, is_arg) in enumerate(zip(args, self.call_argument)):
            if isinstance(a, torch.Tensor) and a.device.type == "rbln":
                devices.setdefault(is_arg, a.device)
                a = a.cpu() if is_arg else self.host_copies.get(i, a)[0]
            moved.append(a)
        device = devices.get(True, devices.get(False))
        versions = [_version_or_none(a) for a in moved]
        if self._cpu_gm is None:
            self._cpu_gm = _cpu_graph_module(self.gm)
        outs = self._cpu_gm(*moved)
        self._write_back(args, moved, versions)
        if device is None:
            return outs
        # Results go back to the device the inputs came from.
        return type(outs)(o.to(device) if isinstance(o, torch.Tensor) else o for o in outs) \
            if isinstance(outs, (list, tuple)) else outs

    def _write_back(self, args, moved, versions):
        """In-place writes of the CPU run (a buffer update, an in-place op on
        an argument) go to the device tensors they stand for."""
        for i, (a, host, version) in enumerate(zip(args, moved, versions)):
            if (host is a or version is None or not isinstance(a, torch.Tensor)
                    or _version_or_none(host) == version):
                continue
            with torch.no_grad():
                a.copy_(host)
            self.host_copies.written_back(i, a)

    def _warn_once(self, detail):
        """A whole graph on the CPU is a large hidden cost: say so once per
        graph, at any log level (TORCH_RBLN_LOG_LEVEL=INFO logs every call)."""
        if self._warned:
            return
        self._warned = True
        warnings.warn(
            f"rbln: graph {self.name} runs on the CPU (compile_error fallback): {detail}. "
            "Inputs that are not call arguments (parameters, buffers) are read through CPU "
            "copies kept while they are unchanged. Options: "
            "torch.compile(..., options={'host_ops': 'unimplemented'}) runs only the missing "
            "ops on the host; TORCH_RBLN_DISABLE_FALLBACK=compile_error raises instead; "
            "torch_rbln._dynamo.compile_failures() lists the failures.",
            stacklevel=2,
        )


def _cpu_device(value):
    if isinstance(value, torch.device) and value.type == "rbln":
        return torch.device("cpu")
    if isinstance(value, str) and value.partition(":")[0] == "rbln":
        return "cpu"
    return value


def _cpu_graph_module(gm):
    """A copy of a Dynamo graph whose node arguments name the CPU instead of
    rbln devices: tensors the graph makes (torch.arange(n, device=x.device),
    x.to(device=...)) must be made next to the CPU copies of its inputs."""
    graph = torch.fx.Graph()
    graph.output(graph.graph_copy(gm.graph, {}))
    for node in graph.nodes:
        node.args = torch.fx.node.map_aggregate(node.args, _cpu_device)
        node.kwargs = torch.fx.node.map_aggregate(node.kwargs, _cpu_device)
    return torch.fx.GraphModule(gm, graph)


def _version_or_none(t):
    if not isinstance(t, torch.Tensor):
        return None
    try:
        return t._version
    except RuntimeError:  # Inference tensors have no version counter.
        return None
