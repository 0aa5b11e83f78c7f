"""Differential fuzzing of the compiler (issue 15 item 4).

A seeded generator writes random PyTorch programs -- chains of element-wise
ops with broadcasting, scalars, casts, views (permute, slices, expand,
reshape), reductions, softmax/norms, matmuls, concatenation and indexing --
as Python source; a third of the data inputs carry edge values (+-inf, NaN,
+-0, the dtype's extremes, subnormals: `edge_values.sprinkle`, issue 28).
Each program runs compiled with `torch.compile(backend="rbln",
fullgraph=True, dynamic=False)` (host ops off, the compile_error fallback
disabled) and eagerly on the CPU in the same dtype, and both are judged
against a float64 CPU run of the same inputs: the rbln result must be about
as accurate as the CPU's own result in that dtype (elementwise
|rbln - ref| <= 4 |cpu - ref| + tol), with the same dtype and shape, and NaN
and inf where the CPU or the float64 run has them. That oracle tolerates the
rounding differences of fused half-precision chains (the compiler keeps f32
between fused ops, eager CPU rounds after each op) and still catches wrong
values.

A failing program is printed as a self-contained reproducer. The bounded,
fixed-seed run is `graph_fuzz_test`; a longer one is

  TORCH_RBLN_DISABLE_FALLBACK=compile_error python -m torch_rbln.testing.graph_fuzz --seed 1 --graphs 2000

Bugs it finds become regression tests (the compiler's op tests, and
`edge_cases_test.py` for edge values).
"""

import argparse
import os
import random
import sys
import time
import traceback

import torch

from torch_rbln.testing import edge_values

FLOAT_DTYPES = ("float16", "bfloat16", "float32")
# Data inputs that get special values sprinkled in (edge_values.sprinkle).
EDGE_VALUE_FRACTION = 0.3


class _Value:
    def __init__(self, name, shape, dtype):
        self.name, self.shape, self.dtype = name, tuple(shape), dtype

    @property
    def is_float(self):
        return self.dtype in FLOAT_DTYPES


class Program:
    """A random program: `source` defines `f(*inputs)`; `inputs` are
    (shape, dtype, kind) of its arguments."""

    def __init__(self, seed, inputs, lines, outputs):
        self.seed = seed
        self.inputs = inputs
        self.lines = lines
        self.outputs = outputs

    @property
    def source(self):
        args = ", ".join(f"x{i}" for i in range(len(self.inputs)))
        body = "\n".join(f"    {line}" for line in self.lines)
        return f"def f({args}):\n{body}\n    return ({', '.join(self.outputs)},)\n"

    def make_inputs(self):
        gen = torch.Generator().manual_seed(self.seed)
        out = []
        for i, (shape, dtype, kind) in enumerate(self.inputs):
            if kind == "index":
                high = dtype  # For index inputs `dtype` holds the bound.
                out.append(torch.randint(0, high, shape, generator=gen))
            elif kind == "mask":
                out.append(torch.rand(shape, generator=gen) > 0.5)
            else:
                t = (torch.randn(shape, generator=gen) * 2).to(getattr(torch, dtype))
                if self.has_edge_values(i):
                    t = edge_values.sprinkle(t, gen)
                out.append(t)
        return out

    def has_edge_values(self, i):
        """Whether data input `i` holds edge values (issue 28): +-inf, NaN,
        +-0, the dtype's extremes, subnormals among the random values. Drawn
        from the seed apart from the program's structure, so a seed's
        program is the same with or without them."""
        return random.Random(self.seed * 7919 + i).random() < EDGE_VALUE_FRACTION

    def reproducer(self):
        specs = ", ".join(repr(i) for i in self.inputs)
        edges = [i for i, (_, _, kind) in enumerate(self.inputs)
                 if kind == "data" and self.has_edge_values(i)]
        return (
            "import torch\n\n" + self.source +
            f"\n# inputs: (shape, dtype or index bound, kind): {specs}\n"
            f"# edge values (inf, NaN, +-0, extremes, subnormals) in inputs {edges}\n"
            f"# seed {self.seed}: torch_rbln.testing.graph_fuzz.Program.make_inputs\n"
        )


class _Generator:
    def __init__(self, seed, max_ops):
        self.rng = random.Random(seed)
        self.seed = seed
        self.max_ops = max_ops
        self.inputs = []
        self.lines = []
        self.values = []
        self.counter = 0

    # -- helpers ---------------------------------------------------------
    def fresh(self):
        self.counter += 1
        return f"v{self.counter}"

    def emit(self, expr, shape, dtype):
        v = _Value(self.fresh(), shape, dtype)
        self.lines.append(f"{v.name} = {expr}")
        self.values.append(v)
        return v

    def new_input(self, shape, dtype, kind="data"):
        name = f"x{len(self.inputs)}"
        self.inputs.append((tuple(shape), dtype, kind))
        v = _Value(name, shape, dtype if kind == "data" else ("int64" if kind == "index" else "bool"))
        if kind == "data":
            self.values.append(v)
        return v

    def random_shape(self, rank=None):
        rank = self.rng.choice([1, 2, 2, 3, 3, 4]) if rank is None else rank
        return tuple(self.rng.choice([1, 2, 3, 4, 5, 7, 8, 16]) for _ in range(rank))

    def pick(self, pred=lambda v: True):
        cands = [v for v in self.values if pred(v)]
        return self.rng.choice(cands) if cands else None

    def broadcast_partner(self, v):
        """A shape that broadcasts with v's: some dims set to 1, maybe fewer dims."""
        shape = list(v.shape)
        for i in range(len(shape)):
            if self.rng.random() < 0.3:
                shape[i] = 1
        if shape and self.rng.random() < 0.3:
            shape = shape[self.rng.randrange(len(shape)):]
        return tuple(shape)

    def other_operand(self, v):
        same = [w for w in self.values if w is not v and w.is_float and _broadcastable(w.shape, v.shape)]
        if same and self.rng.random() < 0.6:
            return self.rng.choice(same)
        return self.new_input(self.broadcast_partner(v), v.dtype)

    # -- ops ---------------------------------------------------------------
    def op_unary(self, v):
        fn = self.rng.choice([
            "torch.abs({})", "torch.neg({})", "torch.exp({}.clamp(-8, 8))", "torch.tanh({})",
            "torch.sigmoid({})", "torch.relu({})", "torch.nn.functional.gelu({})",
            "torch.nn.functional.silu({})", "torch.log({}.abs() + 0.5)",
            "torch.sqrt({}.abs())", "torch.rsqrt({}.abs() + 0.25)", "torch.floor({})",
            "torch.ceil({})", "torch.sin({})", "torch.cos({})", "torch.erf({})",
            "torch.clamp({}, -1.5, 2.0)", "torch.reciprocal({}.abs() + 1)",
            "torch.nn.functional.softplus({})", "torch.nn.functional.hardtanh({})",
            "torch.nn.functional.leaky_relu({}, 0.1)", "torch.nn.functional.elu({})",
            "torch.round({})", "torch.sign({})", "torch.atan({})", "torch.expm1({}.clamp(-4, 4))",
            "torch.log1p({}.abs())", "({} ** 2)", "torch.pow({}.abs(), 1.5)",
        ])
        return self.emit(fn.format(v.name), v.shape, v.dtype)

    def op_binary(self, v):
        w = self.other_operand(v)
        fn = self.rng.choice(["{} + {}", "{} - {}", "{} * {}", "{} / ({}.abs() + 1)",
                              "torch.maximum({}, {})", "torch.minimum({}, {})",
                              "torch.atan2({}, {})", "torch.where({} > {}, {}, {})"])
        if fn.count("{}") == 4:
            expr = fn.format(v.name, w.name, v.name, w.name)
        else:
            expr = fn.format(v.name, w.name)
        return self.emit(expr, _broadcast(v.shape, w.shape), v.dtype)

    def op_scalar(self, v):
        c = self.rng.choice([0.5, 2.0, -1.25, 3.0, 0.1])
        fn = self.rng.choice(["{} + {}", "{} * {}", "{} - {}", "{} / {}", "torch.clamp_min({}, {})"])
        return self.emit(fn.format(v.name, c), v.shape, v.dtype)

    def op_cast(self, v):
        dtype = self.rng.choice([d for d in FLOAT_DTYPES if d != v.dtype])
        return self.emit(f"{v.name}.to(torch.{dtype})", v.shape, dtype)

    def op_reduce(self, v):
        if not v.shape:
            return None
        dim = self.rng.randrange(len(v.shape))
        keep = self.rng.random() < 0.5
        fn = self.rng.choice(["sum", "mean", "amax", "amin", "var", "std", "logsumexp"])
        if fn in ("var", "std") and v.shape[dim] < 2:
            fn = "sum"
        shape = list(v.shape)
        if keep:
            shape[dim] = 1
        else:
            del shape[dim]
        expr = f"torch.{fn}({v.name}, dim={dim}, keepdim={keep})"
        if fn == "logsumexp":
            expr = f"torch.logsumexp({v.name}.clamp(-8, 8), dim={dim}, keepdim={keep})"
        return self.emit(expr, shape, v.dtype)

    def op_softmax(self, v):
        if not v.shape:
            return None
        dim = self.rng.randrange(len(v.shape))
        fn = self.rng.choice(["torch.softmax", "torch.log_softmax"])
        return self.emit(f"{fn}({v.name}, dim={dim})", v.shape, v.dtype)

    def op_norm(self, v):
        if not v.shape:
            return None
        n = v.shape[-1]
        if self.rng.random() < 0.5:
            return self.emit(f"torch.nn.functional.layer_norm({v.name}, ({n},))", v.shape, v.dtype)
        w = self.new_input((n,), v.dtype)
        return self.emit(f"torch.nn.functional.rms_norm({v.name}, ({n},), {w.name})",
                         v.shape, v.dtype)

    def op_view(self, v):
        if len(v.shape) < 1:
            return None
        kind = self.rng.choice(["permute", "transpose", "slice", "unsqueeze", "reshape",
                                "expand", "flip", "contiguous_t"])
        shape = list(v.shape)
        if kind == "permute" and len(shape) >= 2:
            perm = list(range(len(shape)))
            self.rng.shuffle(perm)
            return self.emit(f"{v.name}.permute({perm})", [shape[p] for p in perm], v.dtype)
        if kind == "transpose" and len(shape) >= 2:
            a, b = self.rng.sample(range(len(shape)), 2)
            shape[a], shape[b] = shape[b], shape[a]
            return self.emit(f"{v.name}.transpose({a}, {b})", shape, v.dtype)
        if kind == "slice":
            dim = self.rng.randrange(len(shape))
            if shape[dim] < 2:
                return None
            start = self.rng.randrange(shape[dim] - 1)
            stop = self.rng.randrange(start + 1, shape[dim] + 1)
            step = self.rng.choice([1, 1, 2])
            index = ", ".join([":"] * dim + [f"{start}:{stop}:{step}"])
            shape[dim] = len(range(start, stop, step))
            return self.emit(f"{v.name}[{index}]", shape, v.dtype)
        if kind == "unsqueeze":
            dim = self.rng.randrange(len(shape) + 1)
            shape.insert(dim, 1)
            return self.emit(f"{v.name}.unsqueeze({dim})", shape, v.dtype)
        if kind == "reshape":
            numel = 1
            for d in shape:
                numel *= d
            return self.emit(f"{v.name}.reshape({numel})", [numel], v.dtype)
        if kind == "expand" and 1 in shape:
            new = [self.rng.choice([2, 3]) if d == 1 else d for d in shape]
            return self.emit(f"{v.name}.expand({new})", new, v.dtype)
        if kind == "flip":
            dim = self.rng.randrange(len(shape))
            return self.emit(f"torch.flip({v.name}, [{dim}])", shape, v.dtype)
        if kind == "contiguous_t" and len(shape) >= 2:
            shape[-1], shape[-2] = shape[-2], shape[-1]
            return self.emit(f"{v.name}.mT.contiguous()", shape, v.dtype)
        return None

    def op_matmul(self, v):
        if len(v.shape) < 1:
            return None
        k = v.shape[-1]
        n = self.rng.choice([1, 3, 8, 16])
        w = self.new_input((k, n), v.dtype)
        if len(v.shape) == 1:
            return self.emit(f"torch.matmul({v.name}, {w.name})", (n,), v.dtype)
        shape = list(v.shape[:-1]) + [n]
        if self.rng.random() < 0.5:
            b = self.new_input((n,), v.dtype)
            return self.emit(f"torch.nn.functional.linear({v.name}, {w.name}.t(), {b.name})",
                             shape, v.dtype)
        return self.emit(f"torch.matmul({v.name}, {w.name})", shape, v.dtype)

    def op_cat(self, v):
        if not v.shape:
            return None
        dim = self.rng.randrange(len(v.shape))
        shape = list(v.shape)
        other = list(shape)
        other[dim] = self.rng.choice([1, 2, 5])
        w = self.new_input(other, v.dtype)
        shape[dim] += other[dim]
        if self.rng.random() < 0.3 and tuple(other) == v.shape:
            return self.emit(f"torch.stack([{v.name}, {w.name}], dim={dim})",
                             v.shape[:dim] + (2,) + v.shape[dim:], v.dtype)
        return self.emit(f"torch.cat([{v.name}, {w.name}], dim={dim})", shape, v.dtype)

    def op_index(self, v):
        if not v.shape:
            return None
        dim = self.rng.randrange(len(v.shape))
        size = v.shape[dim]
        kind = self.rng.choice(["index_select", "gather", "embedding"])
        if kind == "embedding" and len(v.shape) == 2:
            idx = self.new_input((self.rng.choice([1, 3, 6]),), size, "index")
            return self.emit(f"torch.nn.functional.embedding({idx.name}, {v.name})",
                             (idx.shape[0], v.shape[1]), v.dtype)
        if kind == "gather":
            shape = list(v.shape)
            shape[dim] = self.rng.choice([1, 2, 4])
            idx = self.new_input(tuple(shape), size, "index")
            return self.emit(f"torch.gather({v.name}, {dim}, {idx.name})", shape, v.dtype)
        idx = self.new_input((self.rng.choice([1, 2, 5]),), size, "index")
        shape = list(v.shape)
        shape[dim] = idx.shape[0]
        return self.emit(f"torch.index_select({v.name}, {dim}, {idx.name})", shape, v.dtype)

    def op_masked(self, v):
        m = self.new_input(self.broadcast_partner(v), None, "mask")
        return self.emit(f"{v.name}.masked_fill({m.name}, -2.5)", _broadcast(v.shape, m.shape),
                         v.dtype)

    OPS = (
        ("op_unary", 6), ("op_binary", 6), ("op_scalar", 3), ("op_cast", 1), ("op_reduce", 3),
        ("op_softmax", 1), ("op_norm", 1), ("op_view", 4), ("op_matmul", 2), ("op_cat", 1),
        ("op_index", 1), ("op_masked", 1),
    )

    def generate(self):
        dtype = self.rng.choice(FLOAT_DTYPES)
        self.new_input(self.random_shape(), dtype)
        names, weights = zip(*self.OPS)
        for _ in range(self.rng.randint(1, self.max_ops)):
            v = self.pick(lambda v: v.is_float)
            op = getattr(self, self.rng.choices(names, weights)[0])
            op(v)
        # Return the last value and, sometimes, another live one.
        outputs = [self.values[-1].name]
        if len(self.values) > 2 and self.rng.random() < 0.3:
            other = self.rng.choice(self.values[:-1])
            if other.name.startswith("v"):
                outputs.append(other.name)
        return Program(self.seed, self.inputs, self.lines, outputs)


def _broadcast(a, b):
    n = max(len(a), len(b))
    a = (1,) * (n - len(a)) + tuple(a)
    b = (1,) * (n - len(b)) + tuple(b)
    return tuple(max(x, y) for x, y in zip(a, b))


def _broadcastable(a, b):
    """True if b broadcast against a gives a's shape."""
    if len(b) > len(a):
        return False
    return _broadcast(a, b) == tuple(a)


def generate(seed, max_ops=6):
    return _Generator(seed, max_ops).generate()


def _compile_function(source):
    scope = {"torch": torch}
    exec(compile(source, "<graph_fuzz>", "exec"), scope)
    return scope["f"]


_TOL = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2, torch.float32: 2e-5}


def _judge(got, cpu, ref):
    """None if `got` (rbln) is about as accurate as `cpu` against `ref`."""
    if got.dtype != cpu.dtype:
        return f"dtype {got.dtype}, CPU gives {cpu.dtype}"
    if got.shape != cpu.shape:
        return f"shape {tuple(got.shape)}, CPU gives {tuple(cpu.shape)}"
    if not got.is_floating_point():
        bad = (got != cpu).sum().item()
        return None if bad == 0 else f"{bad} of {got.numel()} values differ"
    g, c, r = got.double(), cpu.double(), ref.double()
    nonfinite = ~torch.isfinite(c) | ~torch.isfinite(r)
    # NaN where the CPU has NaN, or where the float64 run has: a half chain
    # on the CPU overflows an intermediate to inf (then inf - inf) where the
    # compiled chain, in float32 between fused ops, does not; and some CPU
    # kernels give NaN where float64 (and rbln) do not (vectorized gelu of
    # +inf).
    nan = torch.isnan(g)
    if ((nan != torch.isnan(c)) & (nan != torch.isnan(r))).any():
        return "NaN positions differ from the CPU's"
    finite = ~nonfinite & torch.isfinite(g)
    if (~torch.isfinite(g) & ~nonfinite).any():
        return "non-finite values where the CPU has finite ones"
    tol = _TOL[got.dtype] * (1 + r.abs())
    err_rbln = (g - r).abs()
    err_cpu = (c - r).abs()
    bad = finite & (err_rbln > 4 * err_cpu + tol)
    if bad.any():
        i = bad.nonzero()[0].tolist()
        return (f"{int(bad.sum())} of {got.numel()} values off: at {i} rbln {g[tuple(i)].item():.6g}, "
                f"CPU {c[tuple(i)].item():.6g}, float64 reference {r[tuple(i)].item():.6g}")
    return None


def run_program(program):
    """('ok' | 'skip' | 'fail', message)."""
    fn = _compile_function(program.source)
    inputs = program.make_inputs()
    try:
        cpu = fn(*inputs)
        ref = fn(*[t.double() if t.is_floating_point() else t for t in inputs])
    except Exception as e:  # noqa: BLE001 -- a generator bug, not the compiler's
        return "skip", f"CPU raises {type(e).__name__}: {e}"
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="rbln", dynamic=False, fullgraph=True,
                             options={"host_ops": "none"})
    try:
        got = [t.cpu() for t in compiled(*[t.to("rbln") for t in inputs])]
    except Exception as e:  # noqa: BLE001
        text = f"{type(e).__name__}: {e}"
        if "The following operators are not implemented" in text:
            first = text[text.index("The following operators"):].splitlines()[0]
            return "skip", first
        return "fail", text.strip().splitlines()[0][:500] if text.strip() else type(e).__name__
    for i, (g, c, r) in enumerate(zip(got, cpu, ref)):
        problem = _judge(g, c, r.to(c.dtype) if not c.is_floating_point() else r)
        if problem:
            return "fail", f"output {i}: {problem}"
    return "ok", ""


def fuzz(seed, graphs, max_ops=6, log=sys.stdout, stop_after=None):
    """Runs `graphs` programs from `seed`; returns {status: count} and the failures."""
    counts = {"ok": 0, "skip": 0, "fail": 0}
    failures = []
    skipped = {}
    for i in range(graphs):
        program = generate(seed * 1_000_003 + i, max_ops)
        try:
            status, message = run_program(program)
        except Exception:  # noqa: BLE001 -- the harness itself
            status, message = "fail", "harness: " + traceback.format_exc().splitlines()[-1]
        counts[status] += 1
        if status == "skip":
            skipped[message] = skipped.get(message, 0) + 1
        if status == "fail":
            failures.append((program, message))
            print(f"--- program {i} (seed {program.seed}) FAILED: {message}\n{program.reproducer()}",
                  file=log, flush=True)
            if stop_after and len(failures) >= stop_after:
                break
    for message, n in sorted(skipped.items(), key=lambda x: -x[1]):
        print(f"skipped {n}: {message}", file=log)
    return counts, failures


def main(argv=None):
    parser = argparse.ArgumentParser(description="Differential fuzzing of the rbln compiler")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--graphs", type=int, default=500)
    parser.add_argument("--max-ops", type=int, default=6)
    args = parser.parse_args(argv)
    if os.environ.get("TORCH_RBLN_DISABLE_FALLBACK") is None:
        print("note: set TORCH_RBLN_DISABLE_FALLBACK=compile_error so compile failures raise",
              file=sys.stderr)
    start = time.time()
    counts, failures = fuzz(args.seed, args.graphs, args.max_ops)
    print(f"seed {args.seed}: {args.graphs} programs, {counts} in {time.time() - start:.0f}s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
