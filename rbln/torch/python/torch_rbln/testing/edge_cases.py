"""Edge-case differential test of rbln against the CPU (issue 28 item 2).

Every case is an op (or a small composite: a norm, an attention) applied to
inputs made of edge values (`edge_values`): zero, constant and negative-zero
rows, values near the dtype's limits, subnormals, +-inf and NaN, every pair
of special values, empty and size-1 dims, integers at their wrap-around
points. Each case runs
  * eagerly on rbln, with the NaN/Inf, alignment and storage-offset checks
    off (TORCH_RBLN_DEV_DISABLE_OP_CPU_FALLBACK) so that the compiled kernels
    see the values instead of handing them to the CPU, and
  * compiled with torch.compile(backend="rbln", fullgraph=True,
    dynamic=False), host ops and the compile_error fallback off (cases that
    share inputs are one graph, so a run compiles a few dozen programs),
and is compared with the same op on the CPU in the same dtype (PyTorch's own
CPU kernels, opmath included). Checks, per case:
  exact  same bits (signed zeros too), NaN where the CPU has NaN;
  ulp:N  NaN and +-inf where the CPU has them, finite values within N units
         in the last place of the result's dtype (transcendental functions:
         the two libm-like implementations differ in their last bit);
  acc    NaN and +-inf where the CPU has them, finite values within the
         dtype's tolerance of the row's scale (sums, norms, GEMMs: the
         accumulation order differs; both accumulate half inputs in float32).
An op the CPU rejects must raise on rbln too. float32 eager ops run on the
CPU (compiled kernels take float16/bfloat16, SPEC H1), so eager float32
cases count as "ran on the CPU".

  python -m torch_rbln.testing.edge_cases [--long] [--mode eager|compiled]

runs the test outside Bazel; --long (or RBLN_EDGE_LONG=1) adds seeds, a
width that is not a multiple of the vector length and a wide one, and
splits every compiled program over the chiplets
(RBLN_COMPILER_PARTITION_MIN_WORK=0).
"""

import argparse
import collections
import dataclasses
import os
import sys
import time
import warnings
from typing import Callable, List, Optional, Sequence

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from torch_rbln.testing import edge_values as ev

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
INT_DTYPES = (torch.int32, torch.int64)
# Checks the eager run switches off so compiled kernels see every value.
UNCHECKED = "nan_inf,alignment,storage_offset"


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    fn: Callable
    inputs: str  # A key of INPUTS.
    check: str  # "exact", "ulp:N" or "acc".
    ints: bool = False  # Integer dtypes instead of float ones.
    eager: bool = True
    compiled: bool = True
    # Per-element absolute tolerance from the inputs (ops the CPU may
    # compute with a fused multiply-add: lerp, add/sub with alpha -- under
    # cancellation FMA and separate rounding differ by more than an ulp of
    # the result, but not by more than an ulp of the operands).
    bound: Optional[Callable] = None
    # Another CPU computation of the same values, also a valid result.
    reference: Optional[Callable] = None


def _input_ulps(n):
    def bound(x):
        return n * torch.finfo(x.dtype).eps * x.double().abs()
    return bound


def _operand_ulps(n):
    def bound(a, b):
        return n * torch.finfo(a.dtype).eps * torch.maximum(a.double().abs(), b.double().abs())
    return bound


def _rows(dtype, width, seed):
    return [ev.edge_rows(width, dtype, seed)]


def _rows_acc(dtype, width, seed):
    return [ev.edge_rows(width, dtype, seed, same_sign_extremes=True)]


def _pairs(dtype, width, seed):
    return list(ev.edge_pairs(width, dtype, seed))


def _gemm(dtype, width, seed):
    gen = torch.Generator().manual_seed(seed + 2)
    # Positive weights: a row of same-sign extremes then overflows in every
    # summation order or in none (bf16/f32 near-max products sum past the
    # float32 range).
    w = (torch.rand(width, 16, generator=gen) * 2 / width).to(dtype)
    return [ev.edge_rows(width, dtype, seed, same_sign_extremes=True), w]


def _attention(dtype, width, seed):
    q = ev.edge_rows(width, dtype, seed, same_sign_extremes=True)
    gen = torch.Generator().manual_seed(seed + 3)
    kv = (torch.randn(2, q.shape[0], width, generator=gen)).to(dtype)
    return [q.reshape(1, 1, *q.shape), kv[0].reshape(1, 1, *q.shape),
            kv[1].reshape(1, 1, *q.shape)]


def _empty(dtype, width, seed):
    return [torch.empty(0, width, dtype=dtype)]


def _size_one(dtype, width, seed):
    # A size-1 normalized / reduced dim: every edge value in a row of its own.
    return [ev.edge_rows(width, dtype, seed).reshape(-1, 1)]


def _ints(dtype, width, seed):
    return [ev.int_edge_rows(width, dtype, seed)]


def _int_pairs(dtype, width, seed):
    a = ev.int_edge_rows(width, dtype, seed)
    gen = torch.Generator().manual_seed(seed + 5)
    return [a, a[torch.randperm(a.shape[0], generator=gen)].roll(1, dims=1)]


def _int_divisors(dtype, width, seed, divisors=(1, -1, 2, -3, 7, -1000)):
    a = ev.int_edge_rows(width, dtype, seed)
    n = len(divisors)
    d = torch.tensor(divisors, dtype=dtype).repeat(a.shape[0], width // n + 1)
    return [a, d[:, :width].contiguous()]


def _int_divisors_but_minus_one(dtype, width, seed):
    # min // -1 overflows: PyTorch defines floor_divide and remainder there
    # (min, 0), but its CPU trunc division traps (SIGFPE).
    return _int_divisors(dtype, width, seed, (1, 2, -2, -3, 7, -1000))


INPUTS = {
    "rows": _rows, "rows_acc": _rows_acc, "pairs": _pairs, "gemm": _gemm,
    "attention": _attention, "empty": _empty, "size_one": _size_one,
    "ints": _ints, "int_pairs": _int_pairs, "int_divisors": _int_divisors,
    "int_divisors_but_minus_one": _int_divisors_but_minus_one,
}


def _ramp(x, n, end):
    """n affine parameters from -end to end (a weight) or end to -end."""
    return torch.linspace(-end, end, n, dtype=x.dtype, device=x.device)


def _norm_affine(x, eps):
    n = x.shape[-1]
    return F.layer_norm(x, (n,), _ramp(x, n, 2), _ramp(x, n, -1), eps=eps)


def _math_sdpa(q, k, v):
    with sdpa_kernel(SDPBackend.MATH):
        return F.scaled_dot_product_attention(q, k, v)


def _cases():
    c = []

    def add(name, fn, inputs, check, **kw):
        c.append(Case(name, fn, inputs, check, **kw))

    # Element-wise, one input.
    for name, fn in [("abs", torch.abs), ("neg", torch.neg), ("relu", torch.relu),
                     ("ceil", torch.ceil), ("floor", torch.floor),
                     ("clamp", lambda x: torch.clamp(x, -2.0, 3.0)),
                     ("clamp_min", lambda x: torch.clamp_min(x, 0.5)),
                     ("isnan", torch.isnan), ("isinf", torch.isinf),
                     ("logical_not", torch.logical_not),
                     ("mul_scalar", lambda x: x * 1e-5), ("add_tiny", lambda x: x + 1e-12),
                     ("sub_half_max", lambda x: x - 65504.0),
                     ("square", lambda x: x * x), ("reciprocal", torch.reciprocal),
                     ("sqrt", torch.sqrt)]:
        add(name, fn, "rows", "exact")
    for dst in FLOAT_DTYPES:
        add(f"to_{str(dst)[6:]}", lambda x, dst=dst: x.to(dst), "rows", "exact")
    for name, fn in [("exp", torch.exp), ("log", torch.log), ("rsqrt", torch.rsqrt),
                     ("tanh", torch.tanh), ("sigmoid", torch.sigmoid), ("silu", F.silu),
                     ("sin", torch.sin), ("cos", torch.cos), ("erf", torch.erf),
                     ("pow_2", lambda x: x ** 2), ("pow_half", lambda x: x ** 0.5),
                     ("pow_neg1", lambda x: x ** -1), ("pow_3", lambda x: x ** 3)]:
        add(name, fn, "rows", "ulp:1")
    # gelu(x) = x * Phi(x) cancels for negative x: within ulps of x.
    add("gelu", F.gelu, "rows", "ulp:1", bound=_input_ulps(4))
    add("gelu_tanh", lambda x: F.gelu(x, approximate="tanh"), "rows", "ulp:1",
        bound=_input_ulps(4))
    # Element-wise, two inputs: every pair of special values.
    for name, fn in [("add", torch.add), ("sub", torch.sub), ("mul", torch.mul),
                     ("div", torch.div), ("maximum", torch.maximum),
                     ("minimum", torch.minimum), ("eq", torch.eq), ("ne", torch.ne),
                     ("lt", torch.lt), ("le", torch.le), ("gt", torch.gt), ("ge", torch.ge),
                     ("where", lambda a, b: torch.where(a > b, a, b)),
                     ("masked_fill", lambda a, b: a.masked_fill(b > 0, -2.5)),
                     ("logical_and", torch.logical_and), ("logical_or", torch.logical_or),
                     ("div_trunc", lambda a, b: torch.div(a, b, rounding_mode="trunc")),
                     ("div_floor", lambda a, b: torch.div(a, b, rounding_mode="floor")),
                     ("copysign", torch.copysign)]:
        add(name, fn, "pairs", "exact")
    # fmax(0, -0): IEEE leaves the zero's sign to the implementation.
    add("fmax", torch.fmax, "pairs", "ulp:0")
    add("fmin", torch.fmin, "pairs", "ulp:0")
    for name, fn in [("add_alpha", lambda a, b: torch.add(a, b, alpha=0.5)),
                     ("sub_alpha", lambda a, b: torch.sub(a, b, alpha=3.0)),
                     ("lerp", lambda a, b: torch.lerp(a, b, 0.3))]:
        add(name, fn, "pairs", "ulp:1", bound=_operand_ulps(2))
    for name, fn in [("pow", torch.pow), ("atan2", torch.atan2), ("hypot", torch.hypot),
                     ("remainder", torch.remainder), ("fmod", torch.fmod)]:
        add(name, fn, "pairs", "ulp:1")
    # Reductions and normalizations over rows whose extremes share a sign.
    for name, fn in [("sum", lambda x: x.sum(-1)), ("mean", lambda x: x.mean(-1)),
                     ("sum_dim0", lambda x: x.sum(0)), ("mean_dim0", lambda x: x.mean(0)),
                     ("softmax", lambda x: torch.softmax(x, -1)),
                     ("log_softmax", lambda x: torch.log_softmax(x, -1)),
                     ("softmax_dim0", lambda x: torch.softmax(x, 0)),
                     ("logsumexp", lambda x: torch.logsumexp(x, -1)),
                     ("var", lambda x: x.var(-1)), ("std", lambda x: x.std(-1)),
                     ("prod", lambda x: x.prod(-1)), ("cumsum", lambda x: x.cumsum(-1)),
                     ("vector_norm", lambda x: torch.linalg.vector_norm(x, dim=-1)),
                     ("layer_norm_eps12", lambda x: F.layer_norm(x, x.shape[-1:], eps=1e-12)),
                     ("layer_norm_eps5", lambda x: F.layer_norm(x, x.shape[-1:], eps=1e-5)),
                     ("layer_norm_affine", lambda x: _norm_affine(x, 1e-12)),
                     ("rms_norm_eps12", lambda x: F.rms_norm(x, x.shape[-1:], eps=1e-12)),
                     ("rms_norm_eps5", lambda x: F.rms_norm(x, x.shape[-1:], eps=1e-5)),
                     ("group_norm", lambda x: F.group_norm(x.reshape(1, x.shape[0], -1),
                                                           x.shape[0], eps=1e-12)),
                     ("group_norm_affine", lambda x: F.group_norm(
                         x.reshape(1, x.shape[0], -1), x.shape[0], _ramp(x, x.shape[0], 2),
                         _ramp(x, x.shape[0], -1), eps=1e-12)),
                     ("batch_norm_train", lambda x: F.batch_norm(
                         x.reshape(1, x.shape[0], -1), None, None, _ramp(x, x.shape[0], 2),
                         _ramp(x, x.shape[0], -1), training=True, eps=1e-5)),
                     ("batch_norm_eval", lambda x: F.batch_norm(
                         x.reshape(1, x.shape[0], -1), torch.zeros_like(x[:, 0]),
                         torch.zeros_like(x[:, 0]), training=False, eps=1e-5))]:
        add(name, fn, "rows_acc", "acc")
    # The CPU's var_mean returns NaN as the mean of a row that holds an inf
    # (its Welford update subtracts inf from inf); torch.mean gives inf.
    add("var_mean", lambda x: torch.var_mean(x, -1), "rows_acc", "acc",
        reference=lambda x: (x.var(-1), x.mean(-1)))
    for name, fn in [("amax", lambda x: x.amax(-1)), ("amin", lambda x: x.amin(-1)),
                     ("amax_dim0", lambda x: x.amax(0)),
                     ("max_dim", lambda x: torch.max(x, -1)),
                     ("argmax", lambda x: x.argmax(-1)), ("argmin", lambda x: x.argmin(-1))]:
        add(name, fn, "rows", "exact")
    # GEMMs and attention: each output row reads one row of edge values.
    for name, fn in [("mm", torch.mm), ("linear", lambda x, w: F.linear(x, w.t())),
                     ("addmm", lambda x, w: torch.addmm(x[:, :16], x, w, beta=0.5, alpha=2.0)),
                     ("bmm", lambda x, w: torch.bmm(x.unsqueeze(0), w.unsqueeze(0)))]:
        add(name, fn, "gemm", "acc")
    # Where q.k overflows float32 the CPU's flash kernel differs by ISA (a row
    # of 0 with AVX-512 bf16, NaN with AVX2); its math kernel, PyTorch's
    # reference decomposition, gives NaN on every CPU.
    add("sdpa", F.scaled_dot_product_attention, "attention", "acc", reference=_math_sdpa)
    # Empty and size-1 dims.
    for name, fn in [("empty_sum0", lambda x: x.sum(0)), ("empty_mean0", lambda x: x.mean(0)),
                     ("empty_softmax", lambda x: torch.softmax(x, -1)),
                     ("empty_layer_norm", lambda x: F.layer_norm(x, x.shape[-1:])),
                     ("empty_mm", lambda x: x.t() @ x),
                     ("empty_amax0", lambda x: x.amax(0))]:
        add(name, fn, "empty", "exact")
    for name, fn in [("one_layer_norm", lambda x: F.layer_norm(x, (1,), eps=1e-12)),
                     ("one_softmax", lambda x: torch.softmax(x, -1)),
                     ("one_var", lambda x: x.var(-1)), ("one_sum", lambda x: x.sum(-1)),
                     ("one_rms_norm", lambda x: F.rms_norm(x, (1,), eps=1e-12))]:
        add(name, fn, "size_one", "exact" if name == "one_sum" else "acc")
    # Integers: wrap-around as two's complement, as PyTorch's CPU kernels do.
    for name, fn in [("int_neg", torch.neg), ("int_abs", torch.abs),
                     ("int_sum", lambda x: x.sum(-1)), ("int_cumsum", lambda x: x.cumsum(-1)),
                     ("int_mul_scalar", lambda x: x * 3), ("int_add_scalar", lambda x: x + 1)]:
        add(name, fn, "ints", "exact", ints=True)
    for name, fn in [("int_add", torch.add), ("int_sub", torch.sub), ("int_mul", torch.mul),
                     ("int_maximum", torch.maximum), ("int_eq", torch.eq)]:
        add(name, fn, "int_pairs", "exact", ints=True)
    for name, fn in [("int_floor_divide", torch.floor_divide), ("int_remainder", torch.remainder),
                     ("int_div_true", torch.div)]:
        add(name, fn, "int_divisors", "exact", ints=True)
    add("int_div_trunc", lambda a, b: torch.div(a, b, rounding_mode="trunc"),
        "int_divisors_but_minus_one", "exact", ints=True)
    return c


CASES = _cases()


# -- comparison ------------------------------------------------------------------------

def _ordered_bits(t):
    """Integers in the order of the float values (+0 and -0 both 0)."""
    bits = {torch.float16: torch.int16, torch.bfloat16: torch.int16,
            torch.float32: torch.int32}[t.dtype]
    b = t.contiguous().view(bits).to(torch.int64)
    magnitude = b & {torch.int16: 0x7FFF, torch.int32: 0x7FFFFFFF}[bits]
    return torch.where(b < 0, -magnitude, magnitude)


_ACC_TOL = {torch.float16: 1e-2, torch.bfloat16: 4e-2, torch.float32: 1e-4}


# ulp:N allows N units in the last place of a float16/bfloat16 result and
# 4N of a float32 one: two float32 implementations of a transcendental
# function, each within 1-2 ulps of the exact value, differ by a few ulps,
# which rounding to a half type hides.
_F32_ULP_FACTOR = 4


def _mismatches(got, want, check, bound):
    """Elements of `got` that fail `check` against `want` (a bool tensor), or
    why the two cannot be compared."""
    if got.dtype != want.dtype or got.shape != want.shape:
        return f"{got.dtype}{list(got.shape)}, CPU gives {want.dtype}{list(want.shape)}"
    if not want.is_floating_point():
        return got != want
    got_nan, want_nan = torch.isnan(got), torch.isnan(want)
    bad = got_nan != want_nan
    numbers = ~got_nan & ~want_nan
    if check == "exact":
        bits = torch.int16 if want.element_size() == 2 else torch.int32
        return bad | (numbers & (got.view(bits) != want.view(bits)))
    inf = torch.isinf(want) | torch.isinf(got)
    bad |= numbers & inf & (got != want)
    finite = numbers & ~inf
    g, w = got.double(), want.double()
    if check.startswith("ulp:"):
        n = int(check[4:]) * (_F32_ULP_FACTOR if want.dtype == torch.float32 else 1)
        far = (_ordered_bits(got) - _ordered_bits(want)).abs() > n
        if bound is not None:
            far &= (g - w).abs() > bound
        return bad | (finite & far)
    tol = _ACC_TOL[want.dtype]
    scale = w[finite].abs().max().item() if finite.any() else 1.0
    return bad | (finite & ((g - w).abs() > tol * (w.abs() + max(scale, 1e-30) * 0.1)))


def compare(got, want, check, bound=None, alternatives=()) -> Optional[str]:
    """None when `got` (rbln, on the CPU) passes `check` against `want`, or
    element by element against one of `alternatives` (other valid results);
    `bound`: a per-element absolute tolerance that also passes."""
    if isinstance(want, (tuple, list)):
        if not isinstance(got, (tuple, list)) or len(got) != len(want):
            return f"{type(got).__name__} of {len(got)}, CPU gives {len(want)} results"
        for i, (g, w) in enumerate(zip(got, want)):
            problem = compare(g, w, check, None, [a[i] for a in alternatives])
            if problem:
                return f"result {i}: {problem}"
        return None
    bad = _mismatches(got, want, check, bound)
    if isinstance(bad, str):
        return bad
    for alternative in alternatives:
        other = _mismatches(got, alternative, check, bound)
        if not isinstance(other, str):
            bad &= other
    if not bad.any():
        return None
    i = tuple(bad.nonzero()[0].tolist())
    return (f"{int(bad.sum())} of {want.numel()} values differ: at {list(i)} rbln "
            f"{got[i].item()!r}, CPU {want[i].item()!r}")


# -- running -----------------------------------------------------------------------------

@dataclasses.dataclass
class Outcome:
    case: str
    dtype: torch.dtype
    mode: str  # "eager" or "compiled"
    status: str  # "pass", "fail", "cpu" (eager ran on the CPU), "skip"
    message: str = ""


def _call(fn, inputs):
    try:
        with warnings.catch_warnings():
            # var() of one element: PyTorch's "degrees of freedom" warning.
            warnings.simplefilter("ignore", UserWarning)
            return fn(*inputs), None
    except Exception as e:  # noqa: BLE001 -- compared with the other side's error
        return None, e


def _to_cpu(x):
    if isinstance(x, (tuple, list)):
        return tuple(_to_cpu(v) for v in x)
    return x.cpu() if isinstance(x, torch.Tensor) else x


def _judge(case, dtype, mode, inputs, got, got_error, want, want_error, ran_on_cpu=False):
    if want_error is not None:
        if got_error is None:
            return Outcome(case.name, dtype, mode, "fail",
                           f"CPU raises {type(want_error).__name__}: {want_error}; rbln does not")
        return Outcome(case.name, dtype, mode, "pass")
    if got_error is not None:
        return Outcome(case.name, dtype, mode, "fail",
                       f"raises {type(got_error).__name__}: {str(got_error).splitlines()[0]}")
    got = _to_cpu(got)
    bound = case.bound(*inputs) if case.bound else None
    problem = compare(got, want, case.check, bound)
    if problem is None:
        return Outcome(case.name, dtype, mode, "cpu" if ran_on_cpu else "pass")
    alternatives = [r for r in (_call(case.reference, inputs)[0] if case.reference else None,
                                float64_reference(case, inputs)) if r is not None]
    if alternatives and compare(got, want, case.check, bound, alternatives) is None:
        # Where the CPU kernel in this dtype deviates from its own float64
        # result (its float32 sqrt is not correctly rounded, its half prod
        # not computed in float32) or from PyTorch's other kernels (var_mean's
        # mean against mean), rbln gives the float64 / consistent value.
        return Outcome(case.name, dtype, mode, "f64", f"CPU: {problem}")
    return Outcome(case.name, dtype, mode, "fail", problem)


def float64_reference(case, inputs):
    """The case computed in float64 on the CPU and rounded to the CPU
    result's dtype(s); None for integer cases or when it raises."""
    if case.ints:
        return None
    fn = case.reference or case.fn
    want, _ = _call(fn, inputs)
    exact, error = _call(fn, [t.double() for t in inputs])
    if error is not None or want is None:
        return None
    if isinstance(want, (tuple, list)):
        return tuple(e.to(w.dtype) for e, w in zip(exact, want))
    return exact.to(want.dtype)


def _device_runs():
    c = torch.rbln.counters()
    return c.get("dispatch/compiled_runs", 0) + c.get("dispatch/host_path", 0)


def run_eager(cases, dtype, width, seed) -> List[Outcome]:
    out = []
    for case in cases:
        inputs = INPUTS[case.inputs](dtype, width, seed)
        want, want_error = _call(case.fn, inputs)
        dev = [t.to("rbln") for t in inputs]
        fallbacks = torch.rbln.counters().get("dispatch/cpu_fallback", 0)
        runs = _device_runs()
        got, got_error = _call(case.fn, dev)
        on_cpu = (_device_runs() == runs and
                  torch.rbln.counters().get("dispatch/cpu_fallback", 0) > fallbacks)
        out.append(_judge(case, dtype, "eager", inputs, got, got_error, want, want_error,
                          on_cpu))
    return out


def _compile(fn):
    torch._dynamo.reset()
    return torch.compile(fn, backend="rbln", fullgraph=True, dynamic=False,
                         options={"host_ops": "none"})


def run_compiled(cases, dtype, width, seed) -> List[Outcome]:
    """One graph per input kind; a graph that fails to compile is retried
    case by case, so one op's failure names that op."""
    out = []
    by_inputs = collections.defaultdict(list)
    for case in cases:
        by_inputs[case.inputs].append(case)
    for kind, group in by_inputs.items():
        inputs = INPUTS[kind](dtype, width, seed)
        wants = [_call(case.fn, inputs) for case in group]
        ok = [case for case, (_, e) in zip(group, wants) if e is None]
        results = {}
        if ok:
            graph = _compile(lambda *xs: tuple(case.fn(*xs) for case in ok))
            got, error = _call(graph, [t.to("rbln") for t in inputs])
            if error is None:
                results = {case.name: (g, None) for case, g in zip(ok, got)}
        for case, (want, want_error) in zip(group, wants):
            got, got_error = results.get(case.name) or _call(
                _compile(case.fn), [t.to("rbln") for t in inputs])
            out.append(_judge(case, dtype, "compiled", inputs, got, got_error, want,
                              want_error))
    return out


def run(modes=("eager", "compiled"), seeds=(0,), widths=(64,), log=sys.stdout):
    """Runs every case; returns the outcomes."""
    outcomes = []
    for seed in seeds:
        for width in widths:
            for dtype in FLOAT_DTYPES + INT_DTYPES:
                cases = [c for c in CASES if c.ints == (dtype in INT_DTYPES)]
                if "eager" in modes:
                    outcomes += run_eager([c for c in cases if c.eager], dtype, width, seed)
                if "compiled" in modes:
                    outcomes += run_compiled([c for c in cases if c.compiled], dtype, width, seed)
    for o in outcomes:
        if o.status == "fail":
            print(f"FAIL {o.mode} {o.case} {o.dtype}: {o.message}", file=log)
    return outcomes


def summary(outcomes) -> str:
    counts = collections.Counter((o.mode, o.status) for o in outcomes)
    lines = ["mode      cases  equal to CPU  float64 (CPU deviates)  ran on CPU  fail"]
    for mode in ("eager", "compiled"):
        n = sum(v for (m, _), v in counts.items() if m == mode)
        if n:
            lines.append(f"{mode:9} {n:5} {counts[(mode, 'pass')]:13} {counts[(mode, 'f64')]:23} "
                         f"{counts[(mode, 'cpu')]:11} {counts[(mode, 'fail')]:5}")
    return "\n".join(lines)


def deviations(outcomes):
    """{case: sorted dtypes/modes} of the passes where the CPU deviates."""
    found = collections.defaultdict(set)
    for o in outcomes:
        if o.status == "f64":
            found[o.case].add(f"{o.mode} {str(o.dtype)[6:]}")
    return {case: sorted(where) for case, where in sorted(found.items())}


def long_mode() -> bool:
    return os.environ.get("RBLN_EDGE_LONG", "") not in ("", "0")


def plan(long):
    """(seeds, widths) of a run: the short one, or the long one."""
    if long:
        return (0, 1, 2, 3), (64, 67, 4096)
    return (0,), (64,)


def configure_environment(long):
    """The settings a run needs, read when the first op compiles: checks
    off in eager (UNCHECKED), compile errors raised, and in long mode every
    compiled program split over the chiplets (no minimum of work)."""
    os.environ.setdefault("TORCH_RBLN_DEV_DISABLE_OP_CPU_FALLBACK", UNCHECKED)
    os.environ.setdefault("TORCH_RBLN_DISABLE_FALLBACK", "compile_error")
    if long:
        os.environ.setdefault("RBLN_COMPILER_PARTITION_MIN_WORK", "0")


def main(argv: Sequence[str] = None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--long", action="store_true", default=long_mode())
    parser.add_argument("--mode", choices=("eager", "compiled"), action="append")
    args = parser.parse_args(argv)
    configure_environment(args.long)
    seeds, widths = plan(args.long)
    start = time.time()
    outcomes = run(tuple(args.mode or ("eager", "compiled")), seeds, widths)
    print(summary(outcomes))
    for case, where in deviations(outcomes).items():
        print(f"CPU deviates from float64, rbln does not: {case}: {', '.join(where)}")
    print(f"{len(outcomes)} outcomes in {time.time() - start:.0f} s")
    return 1 if any(o.status == "fail" for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
