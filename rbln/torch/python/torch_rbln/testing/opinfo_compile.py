"""OpInfo entries through `torch.compile(backend="rbln")`, against the CPU.

One entry (an OpInfo name + variant) in one dtype is run on a bounded number
of its sample inputs: each sample's tensors become the compiled function's
arguments (moved to rbln), everything else is baked into the traced call.
Compiled with host ops off (`options={"host_ops": "none"}`) and under
`TORCH_RBLN_DISABLE_FALLBACK=compile_error`, so a graph the compiler cannot
take raises instead of running on the CPU.

Statuses (one per entry and dtype):
  pass     every sample matched the CPU (or raised what the CPU raised);
  fail     a sample gave another value / error, or the compile raised;
  skip     the CPU has no kernel for the dtype, or the entry has no sample
           the harness can drive (see `skip_reason`).
`run_entry` returns the status with the first failing sample's message, so a
report can group failures by cause (e.g. "not implemented: [sin]").

Used by the conformance test (`rbln/torch/python/tests/opinfo_compile_test.py`)
and the command-line report (`python -m torch_rbln.testing.opinfo_compile`).
"""

import argparse
import collections
import math
import os
import re
import sys
import time

import torch
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
          "int8": torch.int8, "uint8": torch.uint8, "int16": torch.int16}

# Ops whose results sum many terms: the compiler accumulates in float32 in
# another order than ATen's CPU kernels (which may accumulate in the half
# type). Matched against the OpInfo name's leading part. grid_sampler_2d/3d
# weigh 4-16 input elements with weights the CPU computes in the half type
# (off by ~1e-2 for float16), where the compiler computes them in float32.
_ACCUMULATING = re.compile(
    r"^(addmm|addmv|addbmm|baddbmm|addr|bmm|mm|mv|dot|vdot|inner|matmul|einsum|tensordot|"
    r"linalg\.|nn\.functional\.(linear|bilinear|conv|conv_transpose|scaled_dot|"
    r"layer_norm|group_norm|batch_norm|instance_norm|rms_norm|local_response_norm|"
    r"normalize|cosine|pairwise|pdist|cross_entropy|nll_loss|kl_div|.*pool|interpolate|"
    r"upsample|grid_sample|embedding_bag|softmin|.*loss|multi_head)|"
    r"sum|nansum|mean|nanmean|var|std|prod|cumsum|cumprod|logcumsumexp|logsumexp|"
    r"softmax|log_softmax|_softmax|norm|renorm|dist|cdist|trapz|trapezoid|"
    r"cumulative_trapezoid|cov|corrcoef|chain_matmul|kron|special\.log_softmax|grid_sampler_|"
    r"special\.softmax|masked\.|histc|float_power)"
)


def tolerance(name: str, dtype: torch.dtype) -> dict:
    accumulating = bool(_ACCUMULATING.match(name))
    # Element-wise: a few units in the last place, since decomposed ops may
    # round after each step on the CPU (c10::Half arithmetic) and once here.
    if dtype == torch.float16:
        return {"atol": 2e-2, "rtol": 2e-2} if accumulating else {"atol": 1e-3, "rtol": 4e-3}
    if dtype == torch.bfloat16:
        return {"atol": 8e-2, "rtol": 8e-2} if accumulating else {"atol": 1e-2, "rtol": 3.2e-2}
    tol = {"atol": 1e-4, "rtol": 1.3e-5} if not accumulating else {"atol": 1e-3, "rtol": 1e-3}
    if not (dtype.is_floating_point or dtype.is_complex):
        # Integer inputs: integer results must equal the CPU's (`_compare`),
        # float results (sin of int8) are float32's.
        tol["exact_integers"] = True
    return tol


def entry_name(op) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def entries(names=None):
    """The OpInfo entries, by entry name (optionally only `names`)."""
    from torch.testing._internal.common_methods_invocations import op_db

    out = collections.OrderedDict()
    for op in op_db:
        name = entry_name(op)
        if names is None or name in names:
            out[name] = op
    return out


def _to(device, x):
    """`x` on `device`; a view moves with its base and stays the same view
    (sizes, strides, storage offset), since as_strided addresses the
    storage around it (as_strided.partial_views)."""
    if not isinstance(x, torch.Tensor):
        return x
    if x._base is not None:
        return x._base.detach().to(device).as_strided(x.size(), x.stride(), x.storage_offset())
    return x.to(device)


def _summary(e: BaseException) -> str:
    """The message that names a failure's cause, on one line (graph numbers
    dropped, so reports stay stable between runs)."""
    text = f"{type(e).__name__}: {e}"
    m = re.search(r"The following operators are not implemented: \[([^\]]*)\]", text)
    if m:
        return f"not implemented: [{m.group(1)}]"
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    first = lines[0] if lines else type(e).__name__
    if first.endswith("raised:") and len(lines) > 1:
        first = lines[1]  # BackendCompilerFailed: backend='rbln' raised:\n<the error>
    return re.sub(r"rbln_graph_\d+", "rbln_graph_N", first)[:300]


def _compare(expected, got, tol):
    """None if equal within `tol`, else what differs."""
    e_flat, e_spec = tree_flatten(expected)
    g_flat, g_spec = tree_flatten(got)
    if len(e_flat) != len(g_flat):
        return f"result structure differs: {e_spec} vs {g_spec}"
    for i, (e, g) in enumerate(zip(e_flat, g_flat)):
        if isinstance(e, torch.Tensor):
            if not isinstance(g, torch.Tensor):
                return f"result {i}: expected a tensor, got {type(g).__name__}"
            if g.device.type != "cpu":
                g = g.cpu()
            if e.dtype != g.dtype:
                return f"result {i}: dtype {g.dtype}, CPU gives {e.dtype}"
            if e.shape != g.shape:
                return f"result {i}: shape {tuple(g.shape)}, CPU gives {tuple(e.shape)}"
            exact = tol.get("exact_integers") and not (e.is_floating_point() or e.is_complex())
            try:
                torch.testing.assert_close(g, e, equal_nan=True, check_stride=False,
                                           atol=0 if exact else tol["atol"],
                                           rtol=0 if exact else tol["rtol"])
            except AssertionError as err:
                lines = [ln for ln in str(err).splitlines() if ln.strip()]
                return f"result {i}: " + "; ".join(lines[:4])[:300]
        elif isinstance(e, float) and isinstance(g, float):
            if not (math.isclose(e, g, rel_tol=tol["rtol"], abs_tol=tol["atol"])
                    or (math.isnan(e) and math.isnan(g))):
                return f"result {i}: {g} vs CPU {e}"
        elif e != g and not (isinstance(e, float) and math.isnan(e)):
            return f"result {i}: {g!r} vs CPU {e!r}"
    return None


def _upcast(x):
    """A floating tensor in float64 (a view stays a view of its upcast base,
    so storage offsets keep their meaning); anything else as it is."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        return x
    if x._base is not None:
        return x._base.detach().double().as_strided(x.size(), x.stride(), x.storage_offset())
    return x.detach().double()


def _compare_to_reference(expected, got, reference, tol):
    """None if `got` is as close to the float64 `reference` as the CPU's own
    low-precision `expected` is: per element within max(the usual tolerance,
    2 x |expected - reference|), else what differs. Where the CPU result is
    not finite but the reference is (the CPU overflowed), the usual tolerance
    applies; where the reference is not finite, `got` must equal it.
    Non-floating results must equal the CPU's."""
    e_flat, _ = tree_flatten(expected)
    g_flat, _ = tree_flatten(got)
    r_flat, _ = tree_flatten(reference)
    if not len(e_flat) == len(g_flat) == len(r_flat):
        return "float64 reference: result structure differs"
    for i, (e, g, r) in enumerate(zip(e_flat, g_flat, r_flat)):
        if isinstance(e, float) and isinstance(g, float) and isinstance(r, float):
            e, g, r = (torch.tensor(v, dtype=torch.float64) for v in (e, g, r))
        if not (isinstance(e, torch.Tensor) and e.is_floating_point()):
            diff = _compare([e], [g], tol)
            if diff:
                return diff
            continue
        if not isinstance(r, torch.Tensor) or not isinstance(g, torch.Tensor) or r.shape != e.shape:
            return f"result {i}: the float64 reference has another structure"
        e64, g64, r64 = e.double(), g.cpu().double(), r.detach().double()
        cpu_err = (e64 - r64).abs()
        cpu_err = torch.where(torch.isfinite(cpu_err), cpu_err, torch.zeros_like(cpu_err))
        allowed = torch.maximum(tol["atol"] + tol["rtol"] * r64.abs(), 2 * cpu_err)
        err = (g64 - r64).abs()
        finite = torch.isfinite(r64)
        ok = torch.where(finite, err <= allowed,
                         (g64 == r64) | (torch.isnan(g64) & torch.isnan(r64)))
        if not bool(ok.all()):
            bad = (~ok).nonzero()[0].tolist()
            at = tuple(bad)
            return (f"result {i}: {int((~ok).sum())} / {ok.numel()} elements beyond "
                    f"max(tol, 2 x CPU error) from the float64 reference; at {at}: rbln "
                    f"{g64[at].item():.6g}, CPU {e64[at].item():.6g}, float64 {r64[at].item():.6g}")
    return None


def _counter(name):
    return torch.rbln.counters().get(name, 0)


def run_sample(op, sample, dtype):
    """(ok, message, device_program): one sample compiled on rbln vs CPU;
    ok is None when the CPU itself raises on the sample."""
    flat, spec = tree_flatten((sample.input, sample.args, sample.kwargs))
    where = [i for i, x in enumerate(flat) if isinstance(x, torch.Tensor)]
    fn_op = op.op

    def fn(*tensors):
        items = list(flat)
        for i, t in zip(where, tensors):
            items[i] = t
        inp, args, kwargs = tree_unflatten(items, spec)
        return fn_op(inp, *args, **kwargs)

    cpu_tensors = [flat[i] for i in where]
    # Taken before the CPU call, which may update arguments in place (batch
    # norm's running stats).
    reference_tensors = [_upcast(t) for t in cpu_tensors]
    try:
        expected = fn(*cpu_tensors)
        cpu_error = None
    except Exception as e:  # noqa: BLE001 -- compared by type below
        cpu_error = e
    rbln_tensors = [_to("rbln", t) for t in cpu_tensors]
    compiled = torch.compile(fn, backend="rbln", dynamic=False,
                             options={"host_ops": "none"}, fullgraph=True)
    programs_before = len(torch.rbln.compiled_programs())
    try:
        got = compiled(*rbln_tensors)
        got = tree_map(lambda x: x.cpu() if isinstance(x, torch.Tensor) else x, got)
        rbln_error = None
    except Exception as e:  # noqa: BLE001
        rbln_error = e
    device_program = len(torch.rbln.compiled_programs()) > programs_before
    if cpu_error is not None:
        # Error inputs are rejected by PyTorch's own checks while Dynamo
        # traces (fake tensors), before the compiler sees a graph: nothing of
        # ours to compare. The caller skips such samples.
        return None, f"CPU raises {_summary(cpu_error)}", device_program
    if rbln_error is not None:
        return False, _summary(rbln_error), device_program
    tol = tolerance(entry_name(op), dtype)
    diff = _compare(expected, got, tol)
    if diff is not None and dtype in (torch.float16, torch.bfloat16) and diff.startswith("result "):
        # The CPU's float16/bfloat16 result is itself off the exact value
        # (rounding after each step, accumulation in the half type, overflow):
        # then rbln passes if it is as close to a float64 reference as the
        # CPU is (same rule as models_train_test's gradients).
        try:
            reference = fn(*reference_tensors)
        except Exception:  # noqa: BLE001 -- no float64 kernel: the direct comparison stands
            reference = None
        if reference is not None:
            vs_reference = _compare_to_reference(expected, got, reference, tol)
            diff = None if vs_reference is None else f"{diff}; {vs_reference}"
    return (diff is None), (diff or ""), device_program


def skip_reason(op, dtype):
    if dtype not in op.supported_dtypes("cpu"):
        return f"no {dtype} CPU kernel"
    return None


def run_entry(op, dtype, max_samples=2):
    """(status, message, samples run, device_program) for one entry and dtype."""
    reason = skip_reason(op, dtype)
    if reason:
        return "skip", reason, 0, False
    torch._dynamo.reset()
    try:
        samples = iter(op.sample_inputs("cpu", dtype, requires_grad=False))
    except Exception as e:  # noqa: BLE001
        return "skip", f"sample_inputs raised {_summary(e)}", 0, False
    any_program = False
    compared = tried = 0
    cpu_raises = ""
    # The first `max_samples` samples the CPU runs (error inputs are skipped,
    # at most a few of them).
    while compared < max_samples and tried < max_samples + 4:
        try:
            sample = next(samples)
        except StopIteration:
            break
        except Exception as e:  # noqa: BLE001
            return "skip", f"sample_inputs raised {_summary(e)}", 0, False
        tried += 1
        try:
            ok, message, program = run_sample(op, sample, dtype)
        except Exception as e:  # noqa: BLE001 -- harness-level failure
            ok, message, program = False, f"harness: {_summary(e)}", False
        if ok is None:
            cpu_raises = message
            continue
        compared += 1
        any_program = any_program or program
        if not ok:
            return "fail", message, compared, any_program
    if not compared:
        return "skip", cpu_raises or "no sample inputs", 0, False
    return "pass", "", compared, any_program


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="float16", choices=sorted(DTYPES))
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--only", nargs="*", help="entry names")
    parser.add_argument("--out", help="write 'name<TAB>status<TAB>program<TAB>message' lines")
    args = parser.parse_args(argv)
    os.environ.setdefault("TORCH_RBLN_DISABLE_FALLBACK", "compile_error")
    import torch._dynamo

    torch._dynamo.config.recompile_limit = 64
    torch._dynamo.config.accumulated_recompile_limit = 1 << 20
    dtype = DTYPES[args.dtype]
    rows = []
    start = time.time()
    for name, op in entries(set(args.only) if args.only else None).items():
        t0 = time.time()
        status, message, n, program = run_entry(op, dtype, args.samples)
        rows.append((name, status, program, message))
        print(f"{name}\t{status}\t{'device' if program else '-'}\t{time.time() - t0:.1f}s\t{message}",
              flush=True)
    counts = collections.Counter(r[1] for r in rows)
    print(f"# {args.dtype}: {dict(counts)} in {time.time() - start:.0f}s", file=sys.stderr)
    if args.out:
        with open(args.out, "w") as f:
            for name, status, program, message in rows:
                f.write(f"{name}\t{status}\t{int(program)}\t{message}\n")


if __name__ == "__main__":
    main()
