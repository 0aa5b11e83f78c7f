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

This module is the entry point (rbln_backend, reset, the Dynamo settings);
the pieces it joins: options.py (the options), capture.py (decompositions,
what aot_autograd is given), compiled_graph.py (programs, the program cache,
running them), host_ops.py (segments around host ops), cpu_fallback.py (the
compile_error fallback and compile_failures()), chiplets.py (inspect()'s
placement and memory per chiplet).
"""

import contextlib
import gc
import logging
import os
import threading
import time

import torch
import torch._dynamo
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import make_boxed_func

from .. import _C
from . import fake_impls as _fake_impls
from . import host_ops as _host_ops
from .capture import decompositions, dynamo_capture_seconds, inline_python_custom_ops
from .compiled_graph import CompiledGraph, clear_program_cache
from .constant_folding import fold_constants
from .cpu_fallback import CompiledFunction, CompileFailure, clear_compile_failures
from .grouped_attention import expand_grouped_sdpa
from .nested_regions import RegionInlineError, inline_nested_regions
from .options import Options
from .options import log_info as _log_info

# Fake tensors on rbln give the CPU's result dtypes (fake_impls.py).
_fake_impls.install()

_lock = threading.Lock()
# Every graph compiled since the last torch._dynamo.reset(), for
# compiled_programs() / inspect().
_compiled_graphs = []
_graph_counter = 0
# IR ops the compiler's frontend converts (asked once).
_implemented_ops = None


def _graph_for(aten_gm, name, opts):
    """A CompiledGraph (one program), or a SegmentedGraph when the graph has
    host ops (SPEC J6, host_ops.py)."""
    with _lock:
        global _implemented_ops
        if _implemented_ops is None:
            _implemented_ops = frozenset(_C._graph_implemented_ops())
    kinds = _host_ops.classify(aten_gm, fold_constants(aten_gm), opts.host_ops, _implemented_ops)
    if not _host_ops.has_host_ops(kinds):
        graph = CompiledGraph(aten_gm, name, opts)
        graph.respecialize = opts.compile_per_shape
        return graph
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
    capture = dynamo_capture_seconds()
    opts = Options(options)
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
        try:
            inlined = inline_nested_regions(aten_gm)
        except RegionInlineError as e:
            # Not a CPU fallback: the CPU would run the subgraphs as traced
            # for rbln (device constants inside them).
            raise RuntimeError(
                f"rbln: graph {name}_{kind}: cannot inline a nested compile region "
                f"(torch.compiler.nested_compile_region): {e}. Remove the marking from "
                "this region (or torch.rbln.mark_repeated_layers) to compile it inline."
            ) from e
        graph = _graph_for(aten_gm, f"{name}_{kind}", opts)
        graph.phases.update(dynamo_capture=capture, aot_autograd=t0 - start)
        graph.inlined_regions = inlined  # calls of nested compile regions
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
        decompositions=decompositions(),
        # Inputs an inference graph mutates (a static KV cache's
        # index_copy_) stay copy_ nodes of the graph, which fx_to_ir makes
        # updates the program writes in place, instead of whole new values
        # that aot_autograd copies into the inputs after the run.
        keep_inference_input_mutations=True,
    )
    inline_python_custom_ops(gm)
    expand_grouped_sdpa(gm)
    try:
        with _cyclic_gc_paused():
            compiled = aot(gm, example_inputs)
    except CompileFailure as e:
        return CompiledFunction(gm, name, None, failure=e.error)
    except Exception as e:  # noqa: BLE001 -- e.g. the backend error wrapper
        cause = e
        while cause is not None and not isinstance(cause, CompileFailure):
            cause = cause.__cause__ or cause.__context__
        if cause is None:
            raise
        return CompiledFunction(gm, name, None, failure=cause.error)
    return CompiledFunction(gm, name, compiled)


@contextlib.contextmanager
def _cyclic_gc_paused():
    """Python's cyclic garbage collector off while a graph compiles (as
    torch.distributed.checkpoint does around its state dict walks).

    aot_autograd's traces and FX->IR allocate hundreds of thousands of
    objects that live until the compile ends, which start full collections:
    each walks every object of the process (a transformers model's process
    holds ~0.5 M; ~0.2-0.5 s per walk, one or more per decoder-sized
    graph) and finds nothing to free. Reference counting still frees
    everything without cycles; cycles made meanwhile wait for the next
    collection. A collector the user turned off stays off."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


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
    clear_compile_failures()
    clear_program_cache()
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
