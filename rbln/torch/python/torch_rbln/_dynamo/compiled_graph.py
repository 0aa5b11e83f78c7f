"""One compiled ATen graph (CompiledGraph): its programs -- one per input
shape when the graph has symbolic shapes -- compiled once and shared through
the process-wide program cache (P9: equal graphs, e.g. repeated transformer
blocks, share one program), its constants uploaded once, and how it runs on
device buffers (SPEC J1-J5)."""

import hashlib
import threading
import time
import weakref

import sympy
import torch

from .. import _C
from . import fx_to_ir as _fx_to_ir
from .chiplets import device_buffers_per_chiplet, partitioning
from .constant_folding import fold_constants
from .cpu_fallback import DYNAMIC_SHAPE_MESSAGE, CompileFailure
from .options import log_info as _log_info

_lock = threading.Lock()
# Programs by graph key (IR structure + static shapes): equal graphs, e.g.
# repeated transformer blocks, share one program (P9).
_program_cache = {}


def clear_program_cache():
    with _lock:
        _program_cache.clear()


def _reads_sizes(gm: torch.fx.GraphModule) -> bool:
    """True if a node computes with a symbolic size (x.shape[0], view(...))."""
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        val = node.meta.get("val")
        if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return True
        for a in list(node.args) + list(node.kwargs.values()):
            items = a if isinstance(a, (list, tuple)) else [a]
            for item in items:
                if isinstance(item, torch.SymInt):
                    return True
                if isinstance(item, torch.fx.Node) and isinstance(
                    item.meta.get("val"), (torch.SymInt, torch.SymFloat, torch.SymBool)
                ):
                    return True
    return False


def _concrete_values(gm: torch.fx.GraphModule, args):
    """Each node's value for concrete `args`: the tracer's values
    (node.meta["val"]) with the placeholders' symbols bound to `args`'
    sizes. Tensors get the concrete sizes, strides and storage offsets, and
    values that shared a storage share one again: the inputs as fake
    tensors on their device (fx_to_ir decides in-place updates by their
    device and shared storages), the rest as meta tensors. Runs no op of
    the graph, so graphs whose constants live on a device work too. Raises
    KeyError when a size is not determined by the inputs."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.multiprocessing.reductions import StorageWeakRef

    bindings = {}

    def bind(sym, value):
        if isinstance(sym, torch.SymInt) and isinstance(sym.node.expr, sympy.Symbol):
            bindings[sym.node.expr] = sympy.Integer(value)

    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for node, arg in zip(placeholders, args):
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor) and isinstance(arg, torch.Tensor):
            for sym, size in zip(val.shape, arg.shape):
                bind(sym, size)
        elif isinstance(val, torch.SymInt) and isinstance(arg, int):
            bind(val, arg)

    numbers = {}  # (type, expression) -> value: a graph repeats a few sizes

    def number(v):
        if not isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return v
        key = (type(v), v.node.expr)
        value = numbers.get(key)
        if value is None:
            expr = v.node.expr.xreplace(bindings)
            if not expr.is_number:
                raise KeyError(f"size {v.node.expr} is not set by the graph's inputs")
            value = numbers[key] = {torch.SymInt: int, torch.SymFloat: float,
                                    torch.SymBool: bool}[type(v)](expr)
        return value

    def layout(t):
        return ([number(d) for d in t.shape], [number(d) for d in t.stride()],
                number(t.storage_offset()))

    vals = {n: n.meta["val"] for n in gm.graph.nodes if "val" in n.meta}
    tensors = [t for v in vals.values()
               for t in (v if isinstance(v, (list, tuple)) else (v,))
               if isinstance(t, torch.Tensor)]
    # Bytes each original storage must hold at the concrete sizes.
    extent = {}
    for t in tensors:
        size, stride, offset = layout(t)
        end = offset + sum((s - 1) * st for s, st in zip(size, stride)) + 1 if all(size) else 0
        key = StorageWeakRef(t.untyped_storage())
        extent[key] = max(extent.get(key, 0), end * t.element_size())
    bases = {}

    def concrete(v, device):
        if isinstance(v, torch.Tensor):
            key = StorageWeakRef(v.untyped_storage())
            typed = bases.get((key, v.dtype))
            if typed is None:
                base = bases.get(key)
                if base is None:
                    nbytes = -(-extent[key] // 8) * 8
                    base = bases[key] = torch.empty(nbytes, dtype=torch.uint8,
                                                    device=device or v.device)
                typed = bases[(key, v.dtype)] = base.view(v.dtype)
            return typed.as_strided(*layout(v))
        if isinstance(v, (list, tuple)):
            return type(v)(concrete(x, device) for x in v)
        return number(v)

    # Inputs on their device (fake: no memory), where fx_to_ir looks at the
    # device and at shared storages; the rest on "meta", ~10x cheaper.
    with FakeTensorMode(allow_non_fake_inputs=True):
        values = {n: concrete(vals[n], None) for n in placeholders if n in vals}
    values.update((n, concrete(v, "meta")) for n, v in vals.items() if n not in values)
    return values


def _meta_values(gm: torch.fx.GraphModule, args):
    """Each node's value for concrete `args`, computed on meta tensors."""
    values = {}

    class _MetaInterpreter(torch.fx.Interpreter):
        def run_node(self, n):
            out = super().run_node(n)
            values[n] = out
            return out

    meta_args = [
        torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device="meta")
        if isinstance(a, torch.Tensor) else a
        for a in args
    ]
    _MetaInterpreter(gm).run(*meta_args)
    return values


# First-call phases in the order they happen (seconds; inspect() and the
# INFO log show milliseconds).
_PHASES = ("dynamo_capture", "aot_autograd", "fx_to_ir", "compile", "constants_upload",
           "first_run")


def _phases_text(phases: dict, report: dict = None) -> str:
    parts = [f"{name.replace('_', ' ')} {phases[name] * 1e3:.1f} ms"
             for name in _PHASES if phases.get(name) is not None]
    text = ", ".join(parts)
    if report:
        text += (
            f" [compile: frontend {report['frontend_ms']:.1f} ms, MLIR passes "
            f"{report['mlir_passes_ms']:.1f} ms, LLVM {report['llvm_translate_ms'] + report['llvm_optimize_ms']:.1f} ms "
            f"optimize + {report['llvm_codegen_ms']:.1f} ms codegen, disk load {report['disk_load_ms']:.1f} ms; "
            f"{report['segments']} segment(s), {report['unique_segments']} unique: "
            f"{report['codegen']} compiled, {report['disk_hits']} from disk, "
            f"{report['memory_hits']} in memory, on {report['threads']} thread(s)]")
    return text


def _content_name(ir) -> str:
    """A name that depends only on the graph's structure and shapes."""
    digest = hashlib.sha256(repr(ir.key()).encode()).hexdigest()[:16]
    return f"rbln_graph_{digest}"


class CompiledGraph:
    """One compiled ATen graph: its program(s) and what running them needs.

    Returned by torch.rbln.compiled_programs(); `inspect()` describes it.
    """

    def __init__(self, gm, name, options):
        self.gm = gm
        self.name = name
        self.options = options
        self._programs = {}  # input-shape key -> (IrGraph, GraphProgram or None)
        self._dynamic = False
        self._constants = {}  # (constant key, device) -> device tensor
        self._owned = []  # Constants copied to the device by us (program-owned)
        self._folded = fold_constants(gm)
        self._last_outputs = []
        self._last_inputs = []
        self.compile_seconds = 0.0
        # Where the first call's time went (seconds per phase, _PHASES); the
        # backend fills in the phases before FX->IR.
        self.phases = {}
        # NPUs of the RSD group each program is split over (SPEC A7).
        self.num_npus = None
        # Compile each new input shape even if the graph reads sizes: set for
        # segments after data-dependent host ops (host_ops.SegmentedGraph).
        self.respecialize = False

    # -- compiling ----------------------------------------------------------
    def _target_npus(self, device=None):
        device = device or self.options.compile_device or torch.device(
            "rbln", _C._current_device())
        return self.options.npus_for(device)

    def compile_static(self):
        start = time.perf_counter()
        self.num_npus = self._target_npus()
        try:
            ir = _fx_to_ir.fx_to_ir(self.gm, self.name, folded=self._folded)
        except _fx_to_ir.DynamicShapeError:
            self._dynamic = True
            self._reads_sizes = _reads_sizes(self.gm)
            _log_info(f"graph {self.name} has symbolic shapes; compiling per concrete shape")
            return
        except _fx_to_ir.GraphConversionError as e:
            # A graph the IR cannot express is a compile error like an op
            # the compiler lacks: the compile_error fallback applies (J6).
            raise CompileFailure(e) from None
        self.phases["fx_to_ir"] = time.perf_counter() - start
        _log_info(f"graph {self.name}: FX->IR {(time.perf_counter() - start) * 1e3:.1f} ms "
                  f"({len(ir.nodes)} ops)")
        self._programs[None] = self._compile_ir(ir)

    def _compile_ir(self, ir):
        start = time.perf_counter()
        if not ir.outputs and not ir.updates:
            return ir, None  # Only inputs and constants are returned.
        # A cache_dir is part of the key: compiling there must leave the
        # program on that disk even if it is already in memory elsewhere.
        if self.num_npus is None:
            self.num_npus = self._target_npus()
        key = (ir.key(), self.options.cache_dir, self.num_npus)
        with _lock:
            program = _program_cache.get(key)
        if program is None:
            # The compiler keys programs (in memory and on disk) on the whole
            # graph, name included: name it by content, not by the process's
            # graph counter, so that another process (or this one after
            # torch._dynamo.reset()) finds the same program.
            program_name = _content_name(ir)
            try:
                program = _C._graph_compile(program_name, ir.inputs, ir.nodes, ir.outputs,
                                            self.options.cache_dir, self.num_npus,
                                            updates=ir.updates)
            except (NotImplementedError, RuntimeError) as e:
                # Messages name the graph as the user sees it.
                try:
                    e = type(e)(str(e).replace(program_name, ir.name))
                except Exception:  # noqa: BLE001 -- keep the original then
                    pass
                raise CompileFailure(e) from None
            with _lock:
                _program_cache[key] = program
        elapsed = time.perf_counter() - start
        self.compile_seconds += elapsed
        self.phases.setdefault("compile", elapsed)
        report = program.compile_report
        _log_info(
            f"graph {self.name}: compile {elapsed * 1e3:.1f} ms "
            f"({len(ir.nodes)} ops, {len(ir.inputs)} inputs, {len(ir.outputs)} outputs, "
            f"{program.num_workers} worker(s) on {self.num_npus} NPU(s); "
            f"{report['segments']} segment(s), {report['unique_segments']} unique, "
            f"{report['codegen']} compiled on {report['threads']} thread(s))"
        )
        return ir, program

    def _retarget(self, device):
        """Recompiles the programs when `device`'s group takes another NPU
        count than the one they were split for."""
        npus = self._target_npus(device)
        if npus == self.num_npus:
            return
        self.num_npus = npus
        for key, (ir, _) in list(self._programs.items()):
            self._programs[key] = self._compile_ir(ir)

    def _specialize(self, args):
        key = tuple(
            (tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else a for a in args
        )
        entry = self._programs.get(key)
        if entry is not None:
            return entry
        if self._programs and self._reads_sizes and not self.respecialize:
            # One shape is compiled; a second one would need sizes computed at
            # run time, which static programs cannot do (SPEC J2).
            raise CompileFailure(RuntimeError(DYNAMIC_SHAPE_MESSAGE))
        start = time.perf_counter()
        try:
            try:
                values = _concrete_values(self.gm, args)
            except KeyError:
                values = _meta_values(self.gm, args)
            ir = _fx_to_ir.fx_to_ir(self.gm, self.name, value_of=lambda n: values[n],
                                    folded=fold_constants(self.gm))
        except CompileFailure:
            raise
        except Exception as e:  # noqa: BLE001 -- any failure is a compile error
            raise CompileFailure(RuntimeError(f"{DYNAMIC_SHAPE_MESSAGE} ({e})")) from None
        _log_info(f"graph {self.name}: FX->IR {(time.perf_counter() - start) * 1e3:.1f} ms "
                  f"({len(ir.nodes)} ops, shapes {[k[0] for k in key if isinstance(k, tuple)]})")
        entry = self._compile_ir(ir)
        self._programs[key] = entry
        return entry

    # -- running ------------------------------------------------------------
    @staticmethod
    def _constant_key(kind, src, device):
        return (kind, src if kind == "const" else id(src), device)

    def _constant(self, kind, src, device):
        """A constant input on `device`, uploaded once (SPEC P9: constants are
        program inputs, not code)."""
        key = self._constant_key(kind, src, device)
        t = self._constants.get(key)
        if t is None:
            obj = src
            if kind == "const":
                obj = self.gm
                for part in src.split("."):
                    obj = getattr(obj, part)
            t = obj.detach().contiguous().to(device)
            if t.numel() and (obj.device != t.device
                              or obj.untyped_storage().data_ptr() != t.untyped_storage().data_ptr()):
                # Our own copy, kept with the cached program: reserved, not
                # allocated (SPEC E2), also once it gets device memory.
                _C._graph_set_program_owned(t.untyped_storage().data_ptr(), True)
                self._owned.append(t)
            self._constants[key] = t
        return t

    def __call__(self, args):
        # Boxed calling convention (aot_autograd passes one list).
        return self.run(args)

    def run(self, args, device=None):
        """Runs on `device` (default: the device of the first rbln argument;
        a call with CPU arguments only runs on the current device and returns
        CPU tensors)."""
        args = list(args)
        call_args = list(args)  # run() clears args; write-backs need them.
        inputs = []
        on_host = False
        if device is None:
            for a in args:
                if isinstance(a, torch.Tensor) and a.device.type == "rbln":
                    device = a.device
                    break
            on_host = device is None
            if on_host:
                device = torch.device("rbln", _C._current_device())
        self._retarget(device)
        ir, program = self._programs[None] if not self._dynamic else self._specialize(args)
        originals = []  # What the graph was given, for returned inputs.
        uploaded = None  # (seconds, tensors, bytes) of constants uploaded now
        for (kind, src), (_, _, shape) in zip(ir.input_sources, ir.inputs):
            if kind in ("arg_storage", "arg_storage_from_offset"):
                # Elements of the argument's storage, flat, from offset 0 or
                # from the argument's own offset (fx_to_ir._storage_input:
                # an as_strided reading the storage).
                t = args[src]
                start = 0 if kind == "arg_storage" else t.storage_offset()
                held = t.untyped_storage().nbytes() // t.element_size()
                if start + shape[0] > held:
                    raise RuntimeError(
                        f"rbln: graph {self.name} reads elements {start}..{start + shape[0] - 1} "
                        f"of an argument's storage (as_strided), which holds {held}")
                t = t.as_strided(tuple(shape), (1,), start)
                if t.device != device and t.device.type != "meta":
                    t = t.to(device)
                inputs.append(t)
                originals.append(t)
                continue
            if kind == "arg":
                t = args[src]
                originals.append(t)
                if t.device != device and t.device.type != "meta":
                    # CPU call arguments (and host-op results, e.g. nonzero's
                    # column-major indices) are uploaded each call, laid out
                    # contiguously on the host: programs take contiguous
                    # buffers, and a strided upload would cost a device copy
                    # (runtime/v2v_slow) to make it contiguous there.
                    t = t.to(device, memory_format=torch.contiguous_format)
            else:
                t0 = time.perf_counter()
                new = self._constant_key(kind, src, device) not in self._constants
                t = self._constant(kind, src, device)
                if new:
                    sec, count, nbytes = uploaded or (0.0, 0, 0)
                    uploaded = (sec + time.perf_counter() - t0, count + 1,
                                nbytes + t.numel() * t.element_size())
                originals.append(t)
            inputs.append(t)
        args.clear()
        if uploaded:
            self.phases.setdefault("constants_upload", uploaded[0])
            _log_info(f"graph {self.name}: constants upload {uploaded[0] * 1e3:.1f} ms "
                      f"({uploaded[1]} tensors, {uploaded[2]} bytes; lazy: the runtime "
                      "pushes them at the program's first run)")
        self._last_inputs = [weakref.ref(t) for (kind, _), t in zip(ir.input_sources, inputs)
                             if kind == "arg" and t.device.type == "rbln"]
        if program is None:
            outs = []
        elif self.options.mode == "compile_only":
            # Build artifacts without running (SPEC J5): meta results.
            outs = [
                torch.empty(shape, dtype=getattr(torch, dtype), device="meta")
                for dtype, shape in program.output_specs
            ]
        else:
            first = "first_run" not in self.phases
            run_start = time.perf_counter()
            outs = program.run(inputs)
            if first:
                self.phases["first_run"] = time.perf_counter() - run_start
                _log_info(f"graph {self.name}: first call: "
                          f"{_phases_text(self.phases, program.compile_report)}")
            if on_host:
                outs = [o.cpu() for o in outs]
            # Mutated inputs the program could not update in place
            # (fx_to_ir._copy_into_input), as aot_autograd writes them.
            with torch.no_grad():
                for placeholder, out in ir.write_backs:
                    call_args[placeholder].copy_(outs[out])
        self._last_outputs = [weakref.ref(o) for o in outs if o.device.type == "rbln"]
        results = []
        for kind, v in ir.output_plan:
            if kind == "value":
                results.append(outs[v])
            elif kind == "input":
                results.append(originals[v])
            elif kind == "empty":
                dtype, shape = v
                out_device = torch.device("cpu") if on_host else device
                results.append(torch.empty(shape, dtype=dtype, device=out_device))
            else:
                results.append(v)
        return results

    def release(self):
        """Frees the device buffers this graph holds (its constants); a later
        call uploads them again."""
        for t in self._owned:
            # Someone may still hold it (a graph can return a constant): it
            # is theirs now, counted as allocated again.
            _C._graph_set_program_owned(t.untyped_storage().data_ptr(), False)
        self._owned = []
        self._constants.clear()
        self._last_outputs = []
        self._last_inputs = []

    # -- inspection -----------------------------------------------------------
    def inspect(self) -> dict:
        """Ops, host ops (with host_op_reason) and device memory per chiplet."""
        programs = []
        for key, (ir, program) in self._programs.items():
            if program is None:
                continue
            counts = {}
            for op in ir.ops():
                counts[op] = counts.get(op, 0) + 1
            programs.append({
                "name": program.name,
                "input_specs": program.input_specs,
                "output_specs": program.output_specs,
                "ops": counts,
                # Inputs the program writes in place (IR input names), and
                # the FX inputs written back after the run instead.
                "updated_inputs": [name for name, _ in ir.updates],
                "written_back_inputs": [p for p, _ in ir.write_backs],
                # A graph without host ops is one program; graphs with host
                # ops are SegmentedGraphs (host_ops.py).
                "host_ops": [],
                "partitioning": partitioning(program, self.num_npus, self._device_index()),
                # The compiler's phases (ms) and segments of this program.
                "compile_report": program.compile_report,
            })
        buffers = device_buffers_per_chiplet({
            "inputs": [r() for r in self._last_inputs],
            "outputs": [r() for r in self._last_outputs],
            "constants": list(self._constants.values()),
        })
        return {
            "graph": self.name,
            "mode": self.options.mode,
            "dynamic": self._dynamic,
            "ops": {op: sum(p["ops"].get(op, 0) for p in programs)
                    for op in sorted({op for p in programs for op in p["ops"]})},
            "programs": programs,
            "host_ops": [],
            "device_bytes_per_chiplet": {k: v["total"] for k, v in buffers.items()},
            "device_buffers_per_chiplet": buffers,
            "compile_seconds": self.compile_seconds,
            # The first call's phases in ms: Dynamo capture, aot_autograd,
            # FX->IR, compile, constants upload, first run (None: not
            # measured, e.g. Dynamo did not report its start).
            "compile_phases": {name: (None if self.phases.get(name) is None
                                      else self.phases[name] * 1e3) for name in _PHASES},
        }

    def _device_index(self):
        """The logical device of the latest run (else the current one)."""
        for ref in self._last_inputs + self._last_outputs:
            t = ref()
            if t is not None:
                return t.device.index
        return _C._current_device()

    def __repr__(self):
        ops = sum(len(ir.nodes) for ir, _ in self._programs.values())
        return f"<rbln CompiledGraph {self.name}: {len(self._programs)} program(s), {ops} ops>"
