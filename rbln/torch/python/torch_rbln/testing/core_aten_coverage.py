"""Where each op of PyTorch's Core ATen opset goes in `torch.compile(backend="rbln")`.

The Core ATen opset is the set of overloads PyTorch tags `torch.Tag.core`:
what Dynamo/AOTAutograd graphs are decomposed to (issue 15, item 1). For
each core overload of the installed torch this says what the rbln backend
does with it:

  compiled    the compiler's frontend converts it to device code (the op is
              in `_C._graph_implemented_ops()`, or it is an alias/detach that
              is no code at all);
  decomposed  the backend's decomposition table rewrites it into other ops
              before the compiler sees it (`capture.decompositions()`);
  glue        a size or stride query (`sym_size`, ...): Python scalar work on
              shapes, no tensor data, never device code;
  host op     it is not a static-shape device program by nature; the reason
              is in `HOST_OP_REASONS`. In a compiled graph it runs on the CPU
              between device segments (SPEC J6) unless host ops are off;
  missing     none of the above: a graph holding it fails to compile with
              "The following operators are not implemented: [...]" (and
              runs on the CPU through the compile_error fallback, or as a
              host op with options={"host_ops": "unimplemented"}).

Which dtypes each compiled op takes, with values checked against the CPU,
is the OpInfo conformance table (docs/opinfo-compile.md) and the compiler's
own op x dtype table (the first part of docs/compiler-op-coverage.md).

`python -m torch_rbln.testing.core_aten_coverage` prints the markdown
section; `rbln/torch/python/tests/core_aten_coverage_test.py` checks that
docs/compiler-op-coverage.md holds it.
"""

import collections

import torch

COMPILED = "compiled"
DECOMPOSED = "decomposed"
GLUE = "glue"
HOST_OP = "host op"
MISSING = "missing"
STATUSES = (COMPILED, DECOMPOSED, GLUE, HOST_OP, MISSING)

_RNG = ("RNG: device programs have no generator; the eager rbln op draws from "
        "the device's generator, as an eager step does")
_DATA_DEPENDENT = "data-dependent output shape: buffers are sized at compile time"
_COMPLEX = "complex results: the device has no complex types"
_LAPACK = ("iterative/pivoting linear algebra (LAPACK-style, data-dependent "
           "control flow)")

# Core ops that are host ops by nature, and why (SPEC J6; see
# torch_rbln/_dynamo/host_ops.py for how a host op runs).
HOST_OP_REASONS = {
    **dict.fromkeys(["bernoulli", "native_dropout", "rand", "randn", "randperm",
                     "normal", "uniform", "exponential", "geometric", "cauchy",
                     "log_normal", "random", "multinomial", "rand_like",
                     "randn_like", "randint", "randint_like"], _RNG),
    "_local_scalar_dense": ("data-dependent scalar (Tensor.item()): the value "
                            "exists only once the data does"),
    **dict.fromkeys(["nonzero", "masked_select", "unique", "_unique2",
                     "unique_consecutive", "unique_dim"], _DATA_DEPENDENT),
    **dict.fromkeys(["_fft_r2c", "_fft_c2r", "_fft_c2c", "view_as_complex",
                     "view_as_real", "complex", "polar"], _COMPLEX),
    **dict.fromkeys(["linalg_cholesky_ex", "linalg_lu", "linalg_lu_factor_ex",
                     "linalg_eigh", "linalg_qr", "linalg_svd", "_linalg_svd",
                     "linalg_solve_triangular", "_linalg_eigh", "geqrf",
                     "_linalg_det", "_linalg_slogdet", "linalg_inv_ex",
                     "linalg_ldl_factor_ex", "lu_unpack", "triangular_solve"],
                    _LAPACK),
}


def core_overloads():
    """Every `torch.ops.aten` overload tagged `torch.Tag.core`, by name."""
    found = {}
    for name in dir(torch.ops.aten):
        if name.startswith("_") and name.startswith("__"):
            continue
        try:
            packet = getattr(torch.ops.aten, name)
            overloads = packet.overloads()
        except (AttributeError, RuntimeError):
            continue
        for overload in overloads:
            op = getattr(packet, overload)
            if torch.Tag.core in op.tags:
                found[str(op)] = op
    return dict(sorted(found.items()))


def classify(implemented_ops=None, decompositions=None):
    """{op name: (status, [overload names], reason)} for every core op."""
    from torch_rbln import _device_only_ops
    from torch_rbln._dynamo import capture
    from torch_rbln._dynamo import fx_to_ir

    if implemented_ops is None:
        from torch_rbln import _C
        implemented_ops = _C._graph_implemented_ops()
    implemented = set(implemented_ops) | set(fx_to_ir.IDENTITY_OPS)
    if decompositions is None:
        decompositions = capture.decompositions()

    by_name = collections.defaultdict(list)
    for qualified, op in core_overloads().items():
        by_name[fx_to_ir.ir_op_name(op)].append((qualified, op))

    table = {}
    for name, overloads in sorted(by_name.items()):
        statuses = []
        for qualified, op in overloads:
            if name.startswith("sym_"):
                statuses.append(GLUE)
            elif op in decompositions and op not in _device_only_ops.ONE_DTYPE_DECOMPOSITIONS:
                statuses.append(DECOMPOSED)
            elif name in implemented:
                statuses.append(COMPILED)
            elif name in HOST_OP_REASONS:
                statuses.append(HOST_OP)
            else:
                statuses.append(MISSING)
        # An op is as good as its weakest overload.
        status = max(statuses, key=STATUSES.index)
        overload_names = [q.split(".", 1)[1] if "." in q else q for q, _ in overloads]
        table[name] = (status, overload_names, HOST_OP_REASONS.get(name, ""))
    return table


def markdown(table) -> str:
    counts = collections.Counter(status for status, _, _ in table.values())
    lines = [
        f"torch {torch.__version__.split('+')[0]}: {len(table)} core ops "
        f"({sum(len(o) for _, o, _ in table.values())} overloads). "
        + ", ".join(f"{s}: {counts.get(s, 0)}" for s in STATUSES) + ".",
        "",
        "| op | overloads | status | reason |",
        "|---|---|---|---|",
    ]
    for name, (status, overloads, reason) in table.items():
        lines.append(f"| `{name}` | {', '.join(overloads)} | {status} | {reason} |")
    return "\n".join(lines) + "\n"


def main():
    print(markdown(classify()), end="")


if __name__ == "__main__":
    main()
