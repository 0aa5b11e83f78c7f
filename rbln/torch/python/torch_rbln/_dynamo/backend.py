"""`torch.compile(backend="rbln")`: the whole captured graph as one program.

Flow (SPEC J1-J7):
  Dynamo FX graph --aot_autograd (functionalized ATen, a few decompositions)-->
  ATen FX graph --fx_to_ir--> graph IR --torch_rbln._C._graph_compile--> one
  program, run on the inputs' device memory (`GraphProgram.run`).
Every graph input, module parameters and buffers included, is a runtime
buffer (P9), so blocks with equal shapes share one program. Shapes are static
(J2). A compile failure runs the whole Dynamo graph on the CPU (the call's
arguments downloaded, parameters and buffers read through CPU copies kept
while they are unchanged; beyond I2, which moves only arguments), unless
TORCH_RBLN_DISABLE_FALLBACK contains `compile_error` (I6, J4).

Ops that cannot be part of a static-shape program (data-dependent shapes,
float64; with options={"host_ops": "unimplemented"} also ops the compiler
does not convert) become host ops (J6): the graph is cut into device
segments with ATen host ops between them, one artifact (`SegmentedGraph`,
see host_ops.py) with one inspect().

options={"cache_dir": path} (J5) is the compiler's on-disk program cache for
that compile: each distinct directory gets a compiler of its own (the disk
cache is fixed when a compiler is built; other settings come from the
environment), no cache_dir means RBLN_COMPILER_CACHE_DIR or none. Programs
are named by graph content, so another process, or this one after
torch._dynamo.reset() (which keeps the disk cache), loads them without
codegen.
"""

import hashlib
import logging
import os
import sys
import threading
import time
import warnings
import weakref

import torch
import torch._dynamo
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import make_boxed_func

from .. import _C
from .. import _device_only_ops
from . import fake_impls as _fake_impls
from . import fx_to_ir as _fx_to_ir
from . import grouped_mm as _grouped_mm
from . import host_copies as _host_copies
from . import host_ops as _host_ops
from .constant_folding import fold_constants

# Fake tensors on rbln give the CPU's result dtypes (fake_impls.py).
_fake_impls.install()

DYNAMIC_SHAPE_MESSAGE = "Dynamic shape not supported for rbln backend"

# Options handed to the compiler (SPEC J5).
_MODES = ("default", "compile_only")
_KNOWN_OPTIONS = ("num_devices", "cache_dir", "mode", "npu", "host_ops")

# What reaches the compiler: aot_autograd decomposes the captured graph with
# PyTorch's own core ATen decompositions (`torch._decomp.
# core_aten_decompositions()`), so composite ops (std, logsumexp, addcmul,
# hardswish, nll_loss, stack, roll, ...) arrive as the ~160 ops tagged
# `torch.Tag.core`, which the compiler implements or reports (SPEC J6).
# Except these, which the compiler lowers itself because their
# decomposition would lose a fused kernel or precision. (Ops with a
# CompositeImplicitAutograd kernel -- linear, matmul, layer_norm, rms_norm,
# scaled_dot_product_attention -- decompose while aot_autograd traces,
# whatever this table says; inference sdpa reaches us as the CPU
# flash-attention op (RblnFusedSdpChoice picks it while tracing), sdpa
# with a gradient as PyTorch's math decomposition.)
_NATIVE_OPS = frozenset({
    # The fused attention kernel (one pass, f32 softmax statistics).
    "_scaled_dot_product_flash_attention_for_cpu",
    # Index arithmetic in one kernel; the decompositions go through cumsum
    # (repeat_interleave.Tensor) or index_put (index_copy).
    "repeat_interleave",
    "index_copy",
    # ATen's arange rounds (end - start) / step in double; the
    # decomposition's iota + mul does not match it for half steps.
    "arange",
    # silu's decomposition is x * sigmoid(x) in the input dtype's opmath:
    # the same arithmetic, kept as one op so eager and graph programs share
    # the converter.
    "silu",
    # One-sided clamps stay ops: their decomposition, clamp.Tensor with a
    # None bound, reaches the IR as clamp(x, t), where min and max cannot be
    # told apart (see _clamp_tensor).
    "clamp_min",
    "clamp_max",
    # ATen computes x + value * t1 / t2 in float and rounds once; the
    # decomposition rounds t1 / t2 to a half dtype first.
    "addcdiv",
    # ATen takes the square root of the double variance before rounding;
    # the decomposition sqrt(var) rounds var first, which overflows float32
    # where std is finite (values above 1.8e19; issue 28's edge cases).
    "std",
    "std_mean",
})

_lock = threading.Lock()
# Programs by graph key (IR structure + static shapes): equal graphs, e.g.
# repeated transformer blocks, share one program (P9).
_program_cache = {}
# Every graph compiled since the last torch._dynamo.reset(), for
# compiled_programs() / inspect().
_compiled_graphs = []
# (graph name, exception) of every compile failure since the last reset.
_compile_failures = []
_graph_counter = 0
# IR ops the compiler's frontend converts (asked once).
_implemented_ops = None


def _log_info(message: str) -> None:
    level = os.environ.get("TORCH_RBLN_LOG_LEVEL", "WARNING").upper()
    if level in ("INFO", "DEBUG"):
        print(f"[TORCH-RBLN][INFO] {message}", file=sys.stderr, flush=True)


class _Options:
    def __init__(self, options):
        options = dict(options or {})
        unknown = sorted(set(options) - set(_KNOWN_OPTIONS))
        if unknown:
            raise ValueError(
                f"rbln backend: unknown option(s) {unknown}; "
                f"torch.compile(backend='rbln', options=...) takes {list(_KNOWN_OPTIONS)}"
            )
        self.mode = options.get("mode", "default")
        if self.mode not in _MODES:
            raise ValueError(f"rbln backend: option mode={self.mode!r} is not one of {list(_MODES)}")
        self.num_devices = options.get("num_devices")
        if self.num_devices is not None and (
            not isinstance(self.num_devices, int) or self.num_devices < 1
        ):
            raise ValueError(
                f"rbln backend: option num_devices={self.num_devices!r} must be a positive int "
                "(the RSD group size)"
            )
        self.npu = options.get("npu")
        self._npus_by_device = {}  # Logical device index -> NPUs per program.
        # The device the graph was captured on (from the example inputs).
        self.compile_device = None
        self.host_ops = _host_ops.parse_mode(options.get("host_ops"))
        self.cache_dir = self._check_cache_dir(options.get("cache_dir"))
        self._check_npu()

    @staticmethod
    def _check_cache_dir(cache_dir):
        """The compiler's on-disk program cache for this compile (SPEC J5):
        created if missing; must be a writable directory. "" / None: the
        compiler's default (RBLN_COMPILER_CACHE_DIR, or no disk cache)."""
        if cache_dir is None or cache_dir == "":
            return ""
        if not isinstance(cache_dir, (str, os.PathLike)):
            raise ValueError(
                f"rbln backend: option cache_dir={cache_dir!r} must be a directory path (str)"
            )
        path = os.path.abspath(os.fspath(cache_dir))
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as e:
            raise ValueError(
                f"rbln backend: option cache_dir={cache_dir!r}: cannot create the directory "
                f"({e.strerror}); pass a writable directory"
            ) from None
        if not os.access(path, os.W_OK | os.X_OK):
            raise ValueError(
                f"rbln backend: option cache_dir={cache_dir!r} is not writable; the compiler "
                "stores compiled programs there, pass a writable directory"
            )
        return path

    def _check_npu(self):
        if self.npu is None:
            return
        profile = _C._device_profile()["name"]
        if str(self.npu).lower() != profile.lower():
            raise ValueError(
                f"rbln backend: option npu={self.npu!r} does not match the device, "
                f"which is a {profile!r} NPU (RBLN_SIM_PROFILE); compile for npu={profile!r} "
                "or run on a matching device"
            )

    def npus_for(self, device: torch.device) -> int:
        """The NPUs a program for `device` is split over (SPEC A7, J5): the
        logical device's whole RSD group, or `num_devices` of it (its first
        NPUs). More than the group has is an error naming the group and the
        fix."""
        index = device.index if device.index is not None else _C._current_device()
        npus = self._npus_by_device.get(index)
        if npus is not None:
            return npus  # The device map is fixed once committed.
        group = _C._device_map()["devices"][index]
        npus = len(group) if self.num_devices is None else self.num_devices
        if npus > len(group):
            raise ValueError(
                f"rbln backend: option num_devices={self.num_devices} but {device} groups "
                f"{len(group)} NPU(s) (physical {group}); use num_devices <= {len(group)} "
                f"(or leave it out to split over the whole group), or a logical device with "
                f"a larger group (RBLN_NPUS_PER_DEVICE / RBLN_DEVICE_MAP on ATOM; several "
                "Rebel100 cards need torch.distributed with rbln-ccl)"
            )
        self._npus_by_device[index] = npus
        return npus


class CompileFailure(RuntimeError):
    """A failure the compile_error fallback may turn into a CPU run."""

    def __init__(self, error: BaseException):
        super().__init__(str(error))
        self.error = error


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


def _dynamo_capture_seconds():
    """Seconds since Dynamo started compiling the current frame (bytecode
    tracing up to the backend call), or None if Dynamo does not say."""
    try:
        from torch._dynamo.utils import get_metrics_context

        context = get_metrics_context()
        if context.in_progress() and context._start_time_ns:
            return max(0.0, (time.time_ns() - context._start_time_ns) / 1e9)
    except Exception:  # noqa: BLE001 -- a private API: no number then
        pass
    return None


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


_BUFFER_KINDS = ("inputs", "outputs", "constants")


def partitioning(program, num_npus, device_index) -> dict:
    """How `program` is split over the RSD group of logical device
    `device_index` (SPEC A2, A7): its workers, how many run on each NPU, and
    the workspace bytes (its internal buffers) each run places on each
    chiplet."""
    chiplets = _C._device_profile()["chiplets_per_npu"]
    group = _C._device_map()["devices"][device_index]
    workers = program.num_workers
    per_npu = {}
    workspace = {}
    for w, nbytes in enumerate(program.workspace_bytes):
        npu = group[w // chiplets] if w // chiplets < len(group) else None
        key = f"npu.{npu}.chiplet.{w % chiplets}"
        per_npu[f"npu.{npu}"] = per_npu.get(f"npu.{npu}", 0) + 1
        workspace[key] = workspace.get(key, 0) + nbytes
    return {
        "num_npus": num_npus,
        "workers": workers,
        "workers_per_npu": per_npu,
        "workspace_bytes_per_chiplet": workspace,
    }


def _chiplet_keys():
    """"npu.N.chiplet.C" of every chiplet of the current logical device's
    NPUs (the profile's chiplet count), so inspect() lists empty ones too."""
    profile = _C._device_profile()
    group = _C._device_map()["devices"][_C._current_device()]
    return [f"npu.{npu}.chiplet.{c}" for npu in group for c in range(profile["chiplets_per_npu"])]


def device_buffers_per_chiplet(tensors_by_kind: dict) -> dict:
    """{chiplet: {"inputs", "outputs", "constants", "total"}} device bytes of
    the given tensors' storages (each storage counted once, under its first
    kind); storages without device memory yet (lazy) count nothing."""
    out = {k: dict.fromkeys(_BUFFER_KINDS + ("total",), 0) for k in _chiplet_keys()}
    seen = set()
    for kind in _BUFFER_KINDS:
        for t in tensors_by_kind.get(kind, ()):
            if t is None or t.device.type != "rbln" or t.numel() == 0:
                continue
            base = t.untyped_storage().data_ptr()
            if base in seen:
                continue
            seen.add(base)
            info = _C._storage_info(base)
            if not info["has_device_memory"]:
                continue
            key = f"npu.{info['npu']}.chiplet.{info['chiplet']}"
            entry = out.setdefault(key, dict.fromkeys(_BUFFER_KINDS + ("total",), 0))
            entry[kind] += info["device_bytes"]
            entry["total"] += info["device_bytes"]
    return out


def merge_chiplet_bytes(reports) -> dict:
    """Sums device_buffers_per_chiplet dicts (the segments of one artifact)."""
    out = {k: dict.fromkeys(_BUFFER_KINDS + ("total",), 0) for k in _chiplet_keys()}
    for report in reports:
        for key, entry in report.items():
            target = out.setdefault(key, dict.fromkeys(_BUFFER_KINDS + ("total",), 0))
            for k, v in entry.items():
                target[k] += v
    return out


def _decompositions():
    """PyTorch's core ATen decompositions minus `_NATIVE_OPS`, plus ours."""
    from torch._decomp import core_aten_decompositions

    table = {
        op: fn for op, fn in core_aten_decompositions().items()
        if _fx_to_ir.ir_op_name(op) not in _NATIVE_OPS
    }
    table[torch.ops.aten._safe_softmax.default] = _safe_softmax
    table[torch.ops.aten.clamp.Tensor] = _clamp_tensor
    table[torch.ops.aten.split.Tensor] = _split
    table[torch.ops.aten.split_with_sizes.default] = _split_with_sizes
    table[torch.ops.aten._cdist_forward.default] = _cdist_forward
    table[torch.ops.aten._pdist_forward.default] = _pdist_forward
    # Integer histc (CUDA's; the IR op takes float input): ATen ops.
    table[torch.ops.aten.histc.default] = _device_only_ops.histc_integer
    # MoE experts' grouped GEMM (torch._grouped_mm, transformers' op).
    table.update(_grouped_mm.decompositions())
    return table


def _pairwise_p_norm(diff, p):
    """The p-norm over the last dim as ATen's cdist/pdist kernels define it:
    p=0 counts non-zeros, p=inf is the largest |d|, p=1 and p=2 plain."""
    if p == 0:
        return (diff != 0).to(diff.dtype).sum(-1)
    if p == float("inf"):
        return diff.abs().amax(-1)
    if p == 1:
        return diff.abs().sum(-1)
    if p == 2:
        return (diff * diff).sum(-1).sqrt()
    return diff.abs().pow(p).sum(-1).pow(1.0 / p)


def _cdist_forward(x1, x2, p, compute_mode=None):
    """cdist as the difference of every pair (no device kernel of its own):
    the direct form ATen uses for p != 2 and small inputs; for p=2 ATen may
    use the matmul expansion |a|^2 - 2ab + |b|^2, which cancels where the
    direct form does not, so this is at least as accurate."""
    return _pairwise_p_norm(x1.unsqueeze(-2) - x2.unsqueeze(-3), p)


def _pdist_forward(x, p=2.0):
    """pdist: the upper triangle (row-major, i < j) of cdist(x, x). The pair
    indices are constants of the shape, gathered with index_select."""
    n = x.shape[0]
    rows, cols = torch.triu_indices(n, n, 1, device=x.device).unbind(0)
    return _pairwise_p_norm(x.index_select(0, rows) - x.index_select(0, cols), p)


def _python_custom_op_kernels():
    """{custom op: its Python kernel} for the custom ops inlined before
    aot_autograd (`_inline_python_custom_ops`).

    F.linear_cross_entropy's chunked forms are torch.library custom ops
    (torch_nn::_linear_cross_entropy_batch_chunked[_no_reduction]): opaque
    to aot_autograd, with no decomposition. Their kernel is Python over ATen
    ops (matmul, amax, gather, exp/log, sums) in a loop over batch chunks
    whose sizes are known when tracing, so the compiler gets those ops."""
    try:
        from torch.nn.modules import linear_cross_entropy as lce
    except ImportError:  # Not in this torch.
        return {}
    kernels = {}
    for name in ("_linear_cross_entropy_batch_chunked",
                 "_linear_cross_entropy_batch_chunked_no_reduction"):
        op_def = getattr(lce, name, None)
        packet = getattr(getattr(torch.ops, "torch_nn", None), name, None)
        if op_def is not None and packet is not None and hasattr(op_def, "_init_fn"):
            kernels[packet.default] = op_def._init_fn
    return kernels


def _inline_python_custom_ops(gm: torch.fx.GraphModule) -> int:
    """Replaces calls of the custom ops `_python_custom_op_kernels` lists by
    calls of their Python kernels, which aot_autograd then traces (and
    functionalizes: the kernels write in place) like the rest of the graph.
    Only calls that no gradient flows through: the kernels compute into
    out= arguments, which autograd refuses, and the op's own backward
    formula stays with the op (a graph that trains through it keeps the op,
    which the compiler lacks: the compile_error fallback applies).
    Returns how many calls it replaced."""
    kernels = _python_custom_op_kernels()
    replaced = 0

    def needs_grad(node):
        vals = [a.meta.get("example_value", a.meta.get("val")) for a in node.all_input_nodes]
        return torch.is_grad_enabled() and any(
            isinstance(v, torch.Tensor) and v.requires_grad for v in vals)

    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in kernels and not needs_grad(node):
            node.target = kernels[node.target]
            replaced += 1
    if replaced:
        gm.recompile()
    return replaced


def _clamp_tensor(x, min=None, max=None):
    """clamp with one tensor bound as clamp_min/clamp_max, whose IR says
    which bound it is (an omitted optional tensor leaves no trace in the IR);
    with both bounds, clamp itself (NotImplemented keeps the op)."""
    if min is None and max is not None:
        return torch.ops.aten.clamp_max.Tensor(x, max)
    if max is None and min is not None:
        return torch.ops.aten.clamp_min.Tensor(x, min)
    return NotImplemented


def _split_with_sizes(x, split_sizes, dim=0):
    """split as one `slice` per piece: single-output ops the compiler has."""
    pieces, start = [], 0
    for size in split_sizes:
        pieces.append(torch.ops.aten.slice.Tensor(x, dim, start, start + size))
        start += size
    return pieces


def _split(x, split_size, dim=0):
    total = x.shape[dim]
    sizes = [split_size] * (total // split_size)
    if total % split_size:
        sizes.append(total % split_size)
    return _split_with_sizes(x, sizes or [0], dim)


def _safe_softmax(x, dim, dtype=None):
    """SDPA's softmax: rows that are all -inf give 0, not NaN (torch's own
    decomposition needs `all`). Written out -- the row max, exp(x - max), its
    sum, the quotient -- so the max that finds the all -inf rows is the one
    the softmax subtracts: one pass over the attention scores, not two. Half
    inputs are computed in float32 and rounded once, as softmax is."""
    target = dtype if dtype is not None else x.dtype
    xc = x.to(target)
    if x.shape[dim] == 0:
        return torch.softmax(xc, dim)
    if target in (torch.float16, torch.bfloat16):
        xc = xc.to(torch.float32)
    row_max = torch.amax(xc, dim, keepdim=True)
    e = torch.exp(xc - row_max)
    out = e / e.sum(dim, keepdim=True)
    masked_rows = row_max == float("-inf")
    out = torch.where(masked_rows, torch.zeros((), dtype=out.dtype, device=out.device), out)
    return out.to(target)


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


def _record_failure(name, error):
    with _lock:
        _compile_failures.append((name, error))


def compile_failures():
    """(graph name, exception) of each compile failure since the last
    torch._dynamo.reset(): what made a graph run on the CPU."""
    with _lock:
        return list(_compile_failures)


def _source_name(node) -> str:
    source = getattr(node.meta.get("grapharg"), "source", None)
    name = getattr(source, "name", None) or node.name
    return name() if callable(name) else name


class _CompiledFunction:
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


def _graph_for(aten_gm, name, opts):
    """A CompiledGraph (one program), or a SegmentedGraph when the graph has
    host ops (SPEC J6, host_ops.py)."""
    with _lock:
        global _implemented_ops
        if _implemented_ops is None:
            _implemented_ops = frozenset(_C._graph_implemented_ops())
    kinds = _host_ops.classify(aten_gm, fold_constants(aten_gm), opts.host_ops, _implemented_ops)
    if not _host_ops.has_host_ops(kinds):
        return CompiledGraph(aten_gm, name, opts)
    if opts.host_ops == "none":
        raise CompileFailure(_host_ops.disabled_host_ops_error(kinds))
    graph = _host_ops.SegmentedGraph(
        aten_gm, name, opts, kinds, lambda gm, seg_name: CompiledGraph(gm, seg_name, opts))
    host = [f"{s.nodes[0].name} ({s.reason})" for s in graph.steps if s.kind == _host_ops.HOST]
    segments = sum(1 for s in graph.steps if s.kind == _host_ops.DEVICE)
    _log_info(f"graph {name}: {segments} device segment(s), host ops: {', '.join(host)}")
    return graph


def rbln_backend(gm: torch.fx.GraphModule, example_inputs, options=None, mode=None):
    """The `rbln` Dynamo backend (registered through the torch_dynamo_backends
    entry point, SPEC J1)."""
    global _graph_counter
    capture = _dynamo_capture_seconds()
    opts = _Options(options)
    with _lock:
        _graph_counter += 1
        name = f"rbln_graph_{_graph_counter}"
    start = time.perf_counter()

    def compile_aten(aten_gm, aten_inputs, kind):
        t0 = time.perf_counter()
        if opts.compile_device is None:
            opts.compile_device = next(
                (a.device for a in aten_inputs
                 if isinstance(a, torch.Tensor) and a.device.type == "rbln"), None)
        graph = _graph_for(aten_gm, f"{name}_{kind}", opts)
        graph.phases.update(dynamo_capture=capture, aot_autograd=t0 - start)
        graph.compile_static()
        with _lock:
            _compiled_graphs.append(graph)
        _log_info(
            f"graph {graph.name}: capture {(t0 - start) * 1e3:.1f} ms, "
            f"convert+compile {(time.perf_counter() - t0) * 1e3:.1f} ms"
        )
        graph._boxed_call = True
        return graph

    def compile_backward(aten_gm, aten_inputs):
        try:
            return compile_aten(aten_gm, aten_inputs, "backward")
        except CompileFailure as e:
            # The forward already runs on the device; the backward runs op by
            # op (eager rbln ops, with their own fallbacks).
            _log_info(f"graph {name}_backward runs eagerly: {e}")
            return make_boxed_func(aten_gm.forward)

    aot = aot_autograd(
        fw_compiler=lambda g, i: compile_aten(g, i, "forward"),
        inference_compiler=lambda g, i: compile_aten(g, i, "inference"),
        bw_compiler=compile_backward,
        decompositions=_decompositions(),
        # Inputs an inference graph mutates (a static KV cache's
        # index_copy_) stay copy_ nodes of the graph, which fx_to_ir makes
        # updates the program writes in place, instead of whole new values
        # that aot_autograd copies into the inputs after the run.
        keep_inference_input_mutations=True,
    )
    _inline_python_custom_ops(gm)
    try:
        compiled = aot(gm, example_inputs)
    except CompileFailure as e:
        return _CompiledFunction(gm, name, None, failure=e.error)
    except Exception as e:  # noqa: BLE001 -- e.g. the backend error wrapper
        cause = e
        while cause is not None and not isinstance(cause, CompileFailure):
            cause = cause.__cause__ or cause.__context__
        if cause is None:
            raise
        return _CompiledFunction(gm, name, None, failure=cause.error)
    return _CompiledFunction(gm, name, compiled)


def compiled_programs():
    """The graphs compiled by the rbln backend since the last
    torch._dynamo.reset(), newest last; each has `inspect()`."""
    with _lock:
        return list(_compiled_graphs)


def reset() -> None:
    """Called by torch._dynamo.reset(): drops rbln's compiled graphs and
    programs and the device buffers they hold (SPEC E2, J5), after in-flight
    work completes."""
    torch.rbln.synchronize()
    with _lock:
        graphs = list(_compiled_graphs)
        _compiled_graphs.clear()
        _compile_failures.clear()
        _program_cache.clear()
    for graph in graphs:
        graph.release()
    _C._graph_clear_caches()


rbln_backend.reset = reset


class _RecompileLimitHint(logging.Filter):
    """Adds what to do to Dynamo's recompile-limit warning (SPEC J2)."""

    def filter(self, record):
        msg = str(record.msg)
        if msg.startswith("torch._dynamo hit config.") and _compiled_graphs and "rbln:" not in msg:
            record.msg = msg + (
                "\nrbln: the rbln backend compiles one static-shape program per input shape; "
                "pad inputs or bucket them into a few fixed shapes (batch size, sequence "
                "length) so that the function stays under the recompile limit"
            )
        return True


logging.getLogger("torch._dynamo.convert_frame").addFilter(_RecompileLimitHint())

# Dynamo settings the backend needs while Dynamo traces for it:
#   specialize_float: a changed Python float is a new program, like a changed
#     shape (SPEC G4);
#   automatic_dynamic_shapes: a new shape recompiles a static program instead
#     of turning the graph dynamic (SPEC J2).
# Both are read while Dynamo traces, before any backend is called. PyTorch
# 2.13 scopes such settings to a backend only for torch._dynamo.optimize()
# (its backend_ctx_ctor attribute); torch.compile() wraps the backend and
# drops that attribute. So when the backend loads (the first
# torch.compile(backend="rbln"), through the entry point) they are set for
# the process, except settings the user already chose (the user's value
# wins) or when TORCH_RBLN_DYNAMO_PROCESS_CONFIG=0 (e.g. a process that also
# runs inductor and wants its defaults; then patch them around rbln compiles:
# `with torch._dynamo.config.patch(**torch_rbln._dynamo.DYNAMO_SETTINGS)`).
DYNAMO_SETTINGS = {"specialize_float": True, "automatic_dynamic_shapes": False}
rbln_backend.backend_ctx_ctor = lambda: torch._dynamo.config.patch(**DYNAMO_SETTINGS)


def _apply_process_dynamo_settings():
    if os.environ.get("TORCH_RBLN_DYNAMO_PROCESS_CONFIG", "1").strip().lower() in (
            "0", "false", "off", "no"):
        _log_info("TORCH_RBLN_DYNAMO_PROCESS_CONFIG=0: Dynamo settings left as they are "
                  f"(the rbln backend expects {DYNAMO_SETTINGS})")
        return
    applied = {}
    for name, value in DYNAMO_SETTINGS.items():
        if torch._dynamo.config._is_default(name):
            setattr(torch._dynamo.config, name, value)
            applied[name] = value
        elif getattr(torch._dynamo.config, name) != value:
            _log_info(f"torch._dynamo.config.{name}={getattr(torch._dynamo.config, name)!r} "
                      f"set by the user is kept (the rbln backend expects {value!r})")
    if applied:
        _log_info(f"rbln backend: process-wide Dynamo settings {applied} "
                  "(TORCH_RBLN_DYNAMO_PROCESS_CONFIG=0 leaves them alone)")


_apply_process_dynamo_settings()
