"""Host ops inside a compiled artifact (SPEC J6).

Some ops of a captured ATen graph cannot be part of a static-shape device
program:
  * ops on dtypes the device cannot hold: float64 and complex (the NPU has
    no such units; e.g. the float64 round trip Dynamo writes for
    `x * t.item()`, `x.double()`, `softmax(x, dtype=torch.float64)`), and
    uint16/uint32/uint64 (`hash_tensor`);
  * data-dependent output shapes (`nonzero`, `masked_select`, `unique`,
    boolean-mask indexing) and data-dependent scalars (`Tensor.item()`): the
    program's buffers are sized at compile time, these sizes exist only once
    the data does;
  * random ops (`native_dropout` of a training step's dropout, `rand_like`,
    `bernoulli`, `multinomial`: ATen's nondeterministic_seeded ops): device
    programs have no random number generator; the op runs as the eager rbln
    op on the device tensors (no download), which draws from the device's
    generator with the CPU's algorithm -- so a compiled step draws what the
    same step run eagerly on rbln draws after the same
    `torch.rbln.manual_seed`;
  * with options={"host_ops": "unimplemented"}, ops the rbln compiler's
    frontend does not convert (e.g. `special.airy_ai`).
Such an op becomes a *host op*: the graph is cut into device segments (one
compiled program each, see `SegmentedGraph`) and the host op runs between
them through ATen on the CPU, its tensor inputs downloaded (graph inputs
such as parameters through CPU copies kept while unchanged, host_copies.py)
and its outputs uploaded when a later segment reads them. Each host-op call
counts graph/host_ops and shows in explain() as dispatch/cpu_fallback
("OP: host_op"). Device segments after a
data-dependent op are compiled per concrete size (cached like any
specialization). Scalar glue around them (`sym_size`, `_assert_scalar`,
comparisons of sizes) runs in Python and is not a host op.

Dynamo itself graph-breaks on data-dependent ops unless
`torch._dynamo.config.capture_dynamic_output_shape_ops` (and, for `.item()`,
`capture_scalar_outputs`) is set; then the op runs eagerly between two
compiled graphs instead of inside one artifact.

options={"host_ops": ...} (SPEC J5 extension):
  "data_dependent" (default, also True): data-dependent ops are host ops;
      ops the frontend does not implement fail the compile with
      `NotImplementedError: The following operators are not implemented:
      [...]` and the default compile_error fallback runs the whole graph on
      the CPU (SPEC J6);
  "unimplemented": both kinds are host ops;
  "none" (also False): no host ops; data-dependent ops fail the compile with
      the NotImplementedError above as well.
"""

import operator
import time
from dataclasses import dataclass, field

import torch
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

from .. import _C
from . import fx_to_ir as _fx_to_ir
from .chiplets import merge_chiplet_bytes
from .host_copies import HostCopies

HOST_OPS_MODES = ("data_dependent", "unimplemented", "none")

DATA_DEPENDENT_SHAPE = "data-dependent output shape"
DATA_DEPENDENT_SCALAR = "data-dependent scalar output (Tensor.item())"
NOT_IMPLEMENTED = "not implemented by the rbln compiler: {op}"
NO_DEVICE_DTYPE = "dtype {dtype} has no rbln device representation"
RANDOM = ("random numbers: the eager rbln op draws them from the device's generator "
          "(torch.rbln.manual_seed)")


def parse_mode(value) -> str:
    """The host_ops option as one of HOST_OPS_MODES."""
    if value is None or value is True:
        return "data_dependent"
    if value is False:
        return "none"
    if value in HOST_OPS_MODES:
        return value
    raise ValueError(
        f"rbln backend: option host_ops={value!r} is not one of {list(HOST_OPS_MODES)} "
        "(or True/False)"
    )


# What runs where.
DEVICE = "device"  # Inside a device program.
HOST = "host"  # A host op: ATen on the CPU.
GLUE = "glue"  # Python scalar work on sizes; no tensor data.


@dataclass
class Classification:
    kind: str
    reason: str = ""


def _unbacked(value) -> set:
    try:
        return set(free_unbacked_symbols(value))
    except Exception:  # noqa: BLE001 -- values without symbols
        return set()


def _is_tensor_value(value) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    return isinstance(value, (list, tuple)) and bool(value) and all(
        isinstance(v, torch.Tensor) for v in value)


def classify(gm: torch.fx.GraphModule, folded: dict, mode: str, implemented_ops) -> dict:
    """{call_function node: Classification} for every call_function node."""
    kinds = {}
    implemented = set(implemented_ops)
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        if node in folded:
            kinds[node] = Classification(DEVICE)  # A constant computed at compile time.
            continue
        target = node.target
        if target is operator.getitem:
            src = node.args[0]
            src_kind = kinds.get(src, Classification(DEVICE)).kind if isinstance(
                src, torch.fx.Node) else DEVICE
            kinds[node] = Classification(DEVICE if src_kind == DEVICE else GLUE)
            continue
        val = node.meta.get("val")
        new_symbols = _unbacked(val) - set().union(
            *(_unbacked(n.meta.get("val")) for n in node.all_input_nodes))
        if not _is_tensor_value(val):
            # Sizes, asserts and scalars: .item() is a host op, the rest glue.
            if new_symbols and isinstance(target, torch._ops.OpOverload):
                kinds[node] = Classification(HOST, DATA_DEPENDENT_SCALAR)
            else:
                kinds[node] = Classification(GLUE)
            continue
        if not isinstance(target, torch._ops.OpOverload):
            kinds[node] = Classification(DEVICE)  # fx_to_ir reports what it is.
            continue
        if new_symbols:
            kinds[node] = Classification(HOST, DATA_DEPENDENT_SHAPE)
            continue
        dtype = _unsupported_dtype(node)
        if dtype is not None:
            kinds[node] = Classification(HOST, NO_DEVICE_DTYPE.format(dtype=dtype))
            continue
        if _draws_random_numbers(node):
            kinds[node] = Classification(HOST, RANDOM)
            continue
        op = _fx_to_ir.ir_op_name(target)
        if (mode == "unimplemented" and op not in implemented
                and op not in _fx_to_ir.IDENTITY_OPS):
            kinds[node] = Classification(HOST, NOT_IMPLEMENTED.format(op=op))
            continue
        kinds[node] = Classification(DEVICE)
    return kinds


def _draws_random_numbers(node) -> bool:
    """Whether the op draws random numbers in this call: ATen tags the ops
    that may (nondeterministic_seeded); those random only through dropout
    (the fused attention ops' dropout_p, an RNN's dropout) or only in
    training (native_dropout's train) draw nothing with 0 or train=False."""
    target = node.target
    if torch.Tag.nondeterministic_seeded not in target.tags:
        return False

    def value(arg, i):
        if i < len(node.args):
            return node.args[i]
        return node.kwargs.get(arg.name, arg.default_value if arg.has_default_value() else None)

    for i, arg in enumerate(target._schema.arguments):
        if arg.name in ("dropout_p", "dropout") and value(arg, i) in (0, 0.0):
            return False
        if arg.name in ("train", "training") and value(arg, i) is False:
            return False
    return True


def _unsupported_dtype(node):
    """The first dtype of the node's tensors (result and inputs) that has no
    device representation (float64, complex, uint16/uint32/uint64:
    whatever is not in fx_to_ir.DTYPE_NAMES), or None. Empty results are
    made afresh, whatever their dtype (fx_to_ir.EmptyResult: batch norm's
    uint8 reserve)."""
    values = [node.meta.get("val")] + [n.meta.get("val") for n in node.all_input_nodes]
    for i, v in enumerate(values):
        for t in (v if isinstance(v, (list, tuple)) else [v]):
            if not isinstance(t, torch.Tensor) or t.dtype in _fx_to_ir.DTYPE_NAMES:
                continue
            if i == 0 and isinstance(v, (list, tuple)) and t.numel() == 0:
                continue
            return str(t.dtype).replace("torch.", "")
    return None


def has_host_ops(kinds: dict) -> bool:
    return any(c.kind == HOST for c in kinds.values())


def disabled_host_ops_error(kinds: dict) -> NotImplementedError:
    """The J6 error for host ops that options={"host_ops": "none"} forbids."""
    ops, reasons = [], []
    for node, c in kinds.items():
        if c.kind == HOST:
            name = f"'{_fx_to_ir.ir_op_name(node.target)}'"
            if name not in ops:
                ops.append(name)
            why = ("random numbers have no device generator" if c.reason == RANDOM
                   else "data-dependent results cannot be part of a static-shape program")
            if why not in reasons:
                reasons.append(why)
    return NotImplementedError(
        f"The following operators are not implemented: [{', '.join(ops)}] "
        f"({'; '.join(reasons)}; host ops are disabled by options={{'host_ops': 'none'}})"
    )


@dataclass
class Step:
    """One step of a segmented graph, run in order."""

    kind: str  # DEVICE, HOST or GLUE
    nodes: list  # FX nodes of the parent graph (one for HOST/GLUE)
    reason: str = ""
    inputs: list = field(default_factory=list)  # DEVICE: parent nodes it reads
    outputs: list = field(default_factory=list)  # DEVICE: parent nodes it produces
    program: object = None  # DEVICE: the CompiledGraph of the segment
    calls: int = 0
    seconds: float = 0.0  # HOST: time spent in ATen on the CPU


def schedule(gm: torch.fx.GraphModule, kinds: dict) -> list:
    """Steps: device segments between host ops, as few segments as the
    dependencies allow. Level of a device node = the most host ops on a path
    to it; all device nodes of one level form one segment, which runs before
    the host ops of that level."""
    level = {}
    avail = {}  # When a node's value is available: level of its consumers.
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "get_attr"):
            level[node] = avail[node] = 0
        elif node.op == "call_function":
            lv = max((avail[n] for n in node.all_input_nodes), default=0)
            level[node] = lv
            avail[node] = lv + (0 if kinds[node].kind == DEVICE else 1)
    # Writes of mutated graph inputs (aot_autograd's copy_ into an input)
    # go last, after every host op and segment that may read the input's old
    # value: a segment writes them in place (fx_to_ir), unlike aot's copy
    # after the graph.
    top = max(level.values(), default=0)
    for node in gm.graph.nodes:
        if _is_input_write(node):
            level[node] = top + 1
    steps = []
    for lv in range(max(level.values(), default=0) + 1):
        segment = [n for n in gm.graph.nodes
                   if n.op == "call_function" and level[n] == lv and kinds[n].kind == DEVICE]
        if segment:
            steps.append(Step(DEVICE, segment))
        for n in gm.graph.nodes:
            if n.op == "call_function" and level[n] == lv and kinds[n].kind != DEVICE:
                steps.append(Step(kinds[n].kind, [n], reason=kinds[n].reason))
    _wire_segments(gm, steps)
    return steps


def _is_input_write(node) -> bool:
    return (node.op == "call_function" and node.target is torch.ops.aten.copy_.default
            and getattr(node.args[0], "op", None) == "placeholder")


def _wire_segments(gm, steps):
    """Each segment's inputs (values made outside it) and outputs (values
    read outside it), in graph order."""
    for step in steps:
        if step.kind != DEVICE:
            continue
        inside = set(step.nodes)
        inputs = []
        for n in step.nodes:
            for i in n.all_input_nodes:
                if i not in inside and i.op != "get_attr" and i not in inputs:
                    inputs.append(i)
        step.inputs = inputs
        step.outputs = [n for n in step.nodes if any(u not in inside for u in n.users)]


def segment_module(gm: torch.fx.GraphModule, step: Step) -> torch.fx.GraphModule:
    """The segment as a GraphModule of its own: placeholders for its inputs,
    get_attr constants copied in, an output tuple of its outputs."""
    graph = torch.fx.Graph()
    remap = {}
    for n in step.inputs:
        p = graph.placeholder(n.name)
        p.meta = dict(n.meta)
        remap[n] = p
    for n in step.nodes:
        for i in n.all_input_nodes:
            if i.op == "get_attr" and i not in remap:
                remap[i] = graph.node_copy(i)
        remap[n] = graph.node_copy(n, lambda x: remap[x])
    graph.output(tuple(remap[n] for n in step.outputs))
    return torch.fx.GraphModule(gm, graph)


def _to_cpu(value, cache):
    if isinstance(value, torch.Tensor) and value.device.type != "cpu":
        key = id(value)
        if key not in cache:
            cache[key] = (value, value.cpu())  # Keep value alive: ids stay unique.
        return cache[key][1]
    if isinstance(value, torch.device):
        return torch.device("cpu")
    if isinstance(value, (list, tuple)):
        return type(value)(_to_cpu(v, cache) for v in value)
    return value


def _bytes_to_download(value, cache) -> int:
    """Device bytes `_to_cpu(value, cache)` reads (0 for cached values)."""
    if isinstance(value, torch.Tensor) and value.device.type != "cpu":
        return 0 if id(value) in cache else value.numel() * value.element_size()
    if isinstance(value, (list, tuple)):
        return sum(_bytes_to_download(v, cache) for v in value)
    return 0


def _to_meta(value):
    if isinstance(value, torch.Tensor) and value.device.type != "meta":
        return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device="meta")
    if isinstance(value, torch.device):
        return torch.device("meta")
    if isinstance(value, (list, tuple)):
        return type(value)(_to_meta(v) for v in value)
    return value


class SegmentedGraph:
    """One ATen graph with host ops: device segments (each a compiled
    program, `CompiledGraph`) and host ops run by ATen on the CPU between
    them, called like a CompiledGraph (boxed) and inspected as one artifact.
    Returned by torch.rbln.compiled_programs()."""

    def __init__(self, gm, name, options, kinds, make_segment):
        self.gm = gm
        self.name = name
        # Dynamo capture and aot_autograd seconds (set by the backend).
        self.phases = {}
        self.options = options
        self.kinds = kinds
        self.steps = schedule(gm, kinds)
        self.placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        (self.output_node,) = [n for n in gm.graph.nodes if n.op == "output"]
        # CPU copies of graph inputs (parameters, buffers) that host ops
        # read, kept across calls while unchanged (host_copies.py).
        self.host_copies = HostCopies()
        index = 0
        for step in self.steps:
            if step.kind == DEVICE:
                step.program = make_segment(segment_module(gm, step), f"{name}_seg{index}")
                # Sizes after a data-dependent op differ per call: each one
                # compiles (and caches) a program; this is not J2's dynamic=True.
                step.program.respecialize = True
                index += 1

    @property
    def compile_seconds(self):
        return sum(s.program.compile_seconds for s in self.steps if s.kind == DEVICE)

    def compile_phases_ms(self) -> dict:
        """The first call's phases (compiled_graph._PHASES) in ms: capture and
        aot_autograd of the whole graph, the rest summed over its device
        segments."""
        from .compiled_graph import _PHASES

        out = {}
        for name in _PHASES:
            if name in self.phases:
                value = self.phases[name]
            else:
                values = [s.program.phases.get(name) for s in self.steps if s.kind == DEVICE]
                values = [v for v in values if v is not None]
                value = sum(values) if values else None
            out[name] = None if value is None else value * 1e3
        return out

    def compile_static(self):
        for step in self.steps:
            if step.kind == DEVICE:
                step.program.compile_static()

    def __call__(self, args):
        args = list(args)
        device = next((a.device for a in args
                       if isinstance(a, torch.Tensor) and a.device.type == "rbln"), None)
        on_host = device is None
        if on_host:
            device = torch.device("rbln", _C._current_device())
        compile_only = self.options.mode == "compile_only"
        env = dict(zip(self.placeholders, args))
        args.clear()
        downloads = {}
        for step in self.steps:
            step.calls += 1
            if step.kind == DEVICE:
                outs = step.program.run([env[n] for n in step.inputs], device=device)
                env.update(zip(step.outputs, outs))
                continue
            (node,) = step.nodes
            fetch = (lambda n: env[n])
            read = [0]  # Device bytes read for this host op.
            # A random op runs as the eager op on the device's tensors.
            on_device = step.reason == RANDOM and not compile_only
            if step.kind == HOST and not on_device:
                # Inputs downloaded (once per call; graph inputs such as
                # parameters through copies kept while they are unchanged),
                # run by ATen on the CPU.
                def fetch(n, read=read):
                    if compile_only:
                        return _to_meta(env[n])
                    if n.op == "placeholder":
                        host, nbytes = self.host_copies.get(n.name, env[n])
                    else:
                        nbytes = _bytes_to_download(env[n], downloads)
                        host = _to_cpu(env[n], downloads)
                    read[0] += nbytes
                    return host
            call_args = torch.fx.node.map_arg(node.args, fetch)
            call_kwargs = torch.fx.node.map_arg(node.kwargs, fetch)
            if step.kind == HOST and not on_device:
                call_kwargs = {k: _to_meta(v) if compile_only else _to_cpu(v, downloads)
                               for k, v in call_kwargs.items()}
            start = time.perf_counter()
            if step.kind == HOST and not compile_only:
                _C._graph_host_op(_fx_to_ir.ir_op_name(node.target), read[0])
            try:
                env[node] = node.target(*call_args, **call_kwargs)
            except Exception as e:  # noqa: BLE001 -- say which host op failed
                if compile_only:
                    raise RuntimeError(
                        f"rbln graph {self.name}: mode='compile_only' cannot build the segments "
                        f"after host op {node.name} ({step.reason}): its result is known only "
                        f"when the graph runs ({type(e).__name__}: {e}); run the graph once "
                        "instead"
                    ) from None
                raise
            step.seconds += time.perf_counter() - start
        downloads.clear()
        (results,) = self.output_node.args
        results = [env[r] if isinstance(r, torch.fx.Node) else r for r in results]
        env.clear()
        if compile_only:
            return results
        # Results end where a device program would leave them: on the call's
        # device (host op results uploaded), or on the CPU for a CPU call.
        target = torch.device("cpu") if on_host else device
        return [r.to(target) if isinstance(r, torch.Tensor) and r.device != target else r
                for r in results]

    def release(self):
        self.host_copies.clear()
        for step in self.steps:
            if step.kind == DEVICE:
                step.program.release()

    def inspect(self) -> dict:
        """Ops, host ops (with host_op_reason), programs per device segment
        and device memory per chiplet of the whole artifact."""
        programs, segments, host_ops, ops = [], [], [], {}
        per_chiplet = []
        for step in self.steps:
            if step.kind == DEVICE:
                report = step.program.inspect()
                seg = len([s for s in segments if s["kind"] == DEVICE])
                for p in report["programs"]:
                    programs.append(dict(p, segment=seg))
                # One specialization per size: the segment's ops once.
                for op, count in (report["programs"][0]["ops"] if report["programs"] else {}).items():
                    ops[op] = ops.get(op, 0) + count
                segments.append({"kind": DEVICE, "segment": seg, "programs": len(report["programs"]),
                                 "inputs": [n.name for n in step.inputs],
                                 "outputs": [n.name for n in step.outputs]})
                per_chiplet.append(report["device_buffers_per_chiplet"])
            elif step.kind == HOST:
                (node,) = step.nodes
                op = _fx_to_ir.ir_op_name(node.target)
                ops[op] = ops.get(op, 0) + 1
                entry = {"op": op, "node": node.name, "aten": str(node.target),
                         "host_op_reason": step.reason, "calls": step.calls,
                         "host_seconds": step.seconds}
                host_ops.append(entry)
                segments.append(dict(entry, kind=HOST))
        buffers = merge_chiplet_bytes(per_chiplet)
        return {
            "graph": self.name,
            "mode": self.options.mode,
            "dynamic": any(s.program._dynamic for s in self.steps if s.kind == DEVICE),
            "ops": ops,
            "programs": programs,
            "segments": segments,
            "host_ops": host_ops,
            "device_bytes_per_chiplet": {k: v["total"] for k, v in buffers.items()},
            "device_buffers_per_chiplet": buffers,
            "compile_seconds": self.compile_seconds,
            "compile_phases": self.compile_phases_ms(),
        }

    def __repr__(self):
        n_dev = sum(1 for s in self.steps if s.kind == DEVICE)
        n_host = sum(1 for s in self.steps if s.kind == HOST)
        return (f"<rbln SegmentedGraph {self.name}: {n_dev} device segment(s), "
                f"{n_host} host op(s)>")
