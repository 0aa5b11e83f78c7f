"""OpInfo conformance of the compile path: every OpInfo entry through
`torch.compile(backend="rbln", fullgraph=True)`, host ops off, the
compile_error fallback disabled, against the CPU (issue 15 item 3).

One target per dtype (`opinfo_compile_float16_test`, `..._bfloat16_test`,
`..._float32_test`, and the device's narrow integers `..._int8_test`,
`..._uint8_test`, `..._int16_test`; the dtype comes from
RBLN_OPINFO_COMPILE_DTYPE). Each
runs the first `SAMPLES` samples the CPU accepts of every entry
(`torch_rbln.testing.opinfo_compile`) and classifies the entry:

  pass   every sample compiled into one graph and matched the CPU;
  xfail  an expected failure: the entry is in EXPECTED_FAILURES, with the
         reason it cannot be one static device program;
  gap    the compiler lacks an op ("not implemented: [...]");
  wrong  a sample gave another value, dtype or shape than the CPU;
  error  any other failure (a compile error, a crash in the harness);
  skip   the CPU has no kernel for the dtype, or raises on every sample.

The statuses must equal the dtype's column of the table in
`docs/opinfo-compile.md`, so the doc stays true: a changed status fails
the test, which prints the entries that changed. To regenerate the column
and the dtype's list of reasons after a change:

  RBLN_OPINFO_COMPILE_UPDATE=1 bazel run //rbln/torch/python/tests:opinfo_compile_float16_test

(`bazel run` gives the test BUILD_WORKSPACE_DIRECTORY, where it rewrites the
doc.)
"""
# spec: J1, J6, P2

import os

# Read at process start (SPEC I6): compile failures raise.
os.environ["TORCH_RBLN_DISABLE_FALLBACK"] = "compile_error"

import collections  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import unittest  # noqa: E402

import torch  # noqa: E402
import torch._dynamo  # noqa: E402
from torch_rbln.testing import opinfo_compile  # noqa: E402
from torch_rbln.testing.workspace_docs import workspace_doc  # noqa: E402

DTYPE = os.environ.get("RBLN_OPINFO_COMPILE_DTYPE", "float16")
SAMPLES = int(os.environ.get("RBLN_OPINFO_COMPILE_SAMPLES", "2"))
DOC = "docs/opinfo-compile.md"
COLUMNS = ("float16", "bfloat16", "float32", "int8", "uint8", "int16")
STATUSES = ("pass", "xfail", "gap", "wrong", "error", "skip")

_RNG = "RNG: the values come from a random generator; rbln's and the CPU's streams differ"
_DATA_DEPENDENT = ("data-dependent output shape or control flow: not one static program "
                   "(Dynamo needs a graph break on the CPU too, or the op is a host op)")
_DYNAMO = "Dynamo cannot capture it in one graph on the CPU either (fullgraph=True fails)"
_UNINITIALIZED = "the result is uninitialised memory (empty*): no values to compare"
_SPARSE = "sparse layout: rbln tensors are dense (strided) only"
_COMPLEX = "complex dtype: no complex types on the device"
# Casts into dtypes the device IR lacks (rbln/core/dtype.h: float16, bfloat16,
# float32, int32, int64, bool, int8, int16, uint8). In the default host_ops mode such an op is a
# host op (host_ops.py); options={"host_ops": "none"} turns that off.
_FLOAT64 = ("float64 result: the NPU has no float64 units (no float64 in the device IR); "
            "a host op by default")
_COMPLEX_CAST = ("complex result (chalf/cfloat/cdouble): no complex types on the device; "
                 "a host op by default")
_SEEDED_WRAPPER = ("the OpInfo calls the op through torch.testing._utils.wrapper_set_seed, "
                   "whose freeze_rng_state enters torch._C._DisableFuncTorch (a pybind class "
                   "Dynamo skips): Dynamo cannot capture it on the CPU either "
                   "(backend=\"eager\", fullgraph=True fails the same way)")

# Entries that cannot pass as one static device program, and why. A listed
# entry that fails is `xfail`; one that passes shows up as a changed status.
EXPECTED_FAILURES = {
    **dict.fromkeys([
        "bernoulli", "cauchy", "exponential", "geometric", "log_normal", "multinomial",
        "normal", "normal.in_place", "normal.number_mean", "uniform", "rand_like", "randint",
        "randint_like", "randn", "randn_like", "nn.functional.dropout",
        "nn.functional.dropout2d", "nn.functional.dropout3d", "nn.functional.alpha_dropout",
        "nn.functional.feature_alpha_dropout.with_train",
        "nn.functional.feature_alpha_dropout.without_train",
        "nn.functional.fractional_max_pool2d", "nn.functional.fractional_max_pool3d",
        "nn.functional.rrelu",
    ], _RNG),
    **dict.fromkeys([
        "allclose", "equal", "item", "corrcoef", "cov", "masked_select", "combinations",
        "nonzero", "argwhere", "unique", "unique_consecutive", "narrow", "tensor_split",
        "nn.functional.gaussian_nll_loss",
    ], _DATA_DEPENDENT),
    **dict.fromkeys(["resize_", "resize_as_"], _DYNAMO),
    **dict.fromkeys(["empty", "empty_like", "empty_permuted", "empty_strided",
                     "new_empty", "new_empty_strided"], _UNINITIALIZED),
    **dict.fromkeys(["to_sparse", "sparse.mm.reduce"], _SPARSE),
    **dict.fromkeys(["view_as_complex", "complex"], _COMPLEX),
    # x.double(), x.to("cpu", torch.float64), float_power (computes in
    # float64), softmax/log_softmax/softmin(dtype=torch.float64).
    **dict.fromkeys(["double", "to", "float_power", "softmax.with_dtype",
                     "log_softmax.with_dtype", "nn.functional.softmin.with_dtype"], _FLOAT64),
    **dict.fromkeys(["chalf", "cfloat", "cdouble"], _COMPLEX_CAST),
    "hash_tensor": ("returns uint64, the xor of the elements' float64 bit patterns: neither "
                    "uint64 nor float64 exist on the device; a host op by default"),
    "matrix_exp": ("data-dependent algorithm: linalg_matrix_exp (a CPU kernel, no "
                   "decomposition) picks the Taylor degree and the number of squarings from "
                   "the matrix's norm at run time, a loop whose trip count depends on the values"),
    # Integer samples only (the float samples pass): OpInfo's polygamma
    # samples take n=1 and land on the poles x = 0, -1, -2, ...
    **dict.fromkeys(["polygamma.polygamma_n_0", "polygamma.polygamma_n_1",
                     "polygamma.polygamma_n_2", "polygamma.polygamma_n_3",
                     "polygamma.polygamma_n_4", "special.polygamma.special_polygamma_n_0"],
                    "at a pole of trigamma (a non-positive integer, which integer samples "
                    "hit) rbln gives +inf; ATen's reflection formula pi^2 / sin^2(pi x) "
                    "divides by float32's rounding error of sin(pi x) and gives a finite "
                    "number near 1e13..1e16 that depends on the libm (CUDA's too)"),
    # uint8 only (the float samples pass).
    **dict.fromkeys(["nn.functional.interpolate.bilinear", "nn.functional.interpolate.bicubic",
                     "nn.functional.upsample_bilinear"],
                    "uint8 resizing: the CPU computes it in fixed point (int16 weights scaled "
                    "by 2^precision, rounded to uint8 after each separable pass: "
                    "UpSampleKernel.cpp / UpSampleKernelAVXAntialias.h), rbln in float32 "
                    "as PyTorch's decomposition writes it, rounded once: some elements "
                    "differ by 1"),
    **dict.fromkeys(["nn.functional.scaled_dot_product_attention",
                     "nn.functional.multi_head_attention_forward"], _SEEDED_WRAPPER),
}


def classify(name, status, message):
    """(table status, note) of one harness result."""
    if EXPECTED_FAILURES.get(name) == _UNINITIALIZED and (
            status == "pass" or message.startswith("result ")):
        # Whatever the memory held: a match is luck, a mismatch is no error.
        return "xfail", _UNINITIALIZED
    if status in ("pass", "skip"):
        return status, (message if status == "skip" else "")
    if name in EXPECTED_FAILURES:
        return "xfail", f"{EXPECTED_FAILURES[name]} [{message}]"
    if message.startswith("not implemented:"):
        return "gap", message
    if message.startswith("result ") or message.startswith("CPU raise"):
        return "wrong", message
    return "error", message


_TABLE_BEGIN = "<!-- BEGIN GENERATED TABLE -->"
_TABLE_END = "<!-- END GENERATED TABLE -->"


def _section_markers(dtype):
    return (f"<!-- BEGIN GENERATED {dtype} -->", f"<!-- END GENERATED {dtype} -->")


def parse_table(text):
    """{entry: {dtype: status}} from the doc's generated table."""
    begin, end = text.index(_TABLE_BEGIN), text.index(_TABLE_END)
    table = collections.OrderedDict()
    for line in text[begin:end].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 1 + len(COLUMNS) or cells[0] in ("entry", "") or cells[0].startswith("-"):
            continue
        table[cells[0].strip("`")] = dict(zip(COLUMNS, cells[1:]))
    return table


def render_table(table):
    lines = [_TABLE_BEGIN, "| entry | " + " | ".join(COLUMNS) + " |",
             "|---|" + "---|" * len(COLUMNS)]
    for name in sorted(table):
        lines.append(f"| `{name}` | " + " | ".join(table[name].get(c, "-") for c in COLUMNS) + " |")
    lines.append(_TABLE_END)
    return "\n".join(lines)


def render_counts(table):
    lines = ["| dtype | entries run on the CPU | pass | xfail | gap | wrong | error | "
             "pass rate | skip |", "|---|---|---|---|---|---|---|---|---|"]
    for dtype in COLUMNS:
        counts = collections.Counter(row.get(dtype, "-") for row in table.values())
        ran = sum(counts[s] for s in STATUSES if s != "skip")
        rate = f"{100.0 * counts['pass'] / ran:.1f}%" if ran else "-"
        lines.append(f"| {dtype} | {ran} | " + " | ".join(
            str(counts[s]) for s in ("pass", "xfail", "gap", "wrong", "error")) +
            f" | {rate} | {counts['skip']} |")
    return "\n".join(lines)


def render_notes(results):
    lines = []
    for status in ("wrong", "error", "gap", "xfail", "skip"):
        items = [(n, note) for n, (s, note) in sorted(results.items()) if s == status]
        if not items:
            continue
        lines.append(f"**{status}** ({len(items)}):")
        lines.append("")
        for name, note in items:
            note = note.replace("|", "\\|").replace("\n", " ")
            lines.append(f"- `{name}`: {note}")
        lines.append("")
    return "\n".join(lines).rstrip()


def replace_between(text, begin, end, body):
    a, b = text.index(begin), text.index(end)
    return text[:a] + body + text[b + len(end):]


_COUNTS_BEGIN = "<!-- BEGIN GENERATED COUNTS -->"
_COUNTS_END = "<!-- END GENERATED COUNTS -->"


def update_doc(text, results):
    table = parse_table(text)
    for name, (status, _) in results.items():
        table.setdefault(name, {c: "-" for c in COLUMNS})[DTYPE] = status
    for name in list(table):
        if name not in results:
            table[name][DTYPE] = "-"
        if all(v == "-" for v in table[name].values()):
            del table[name]
    text = replace_between(text, _TABLE_BEGIN, _TABLE_END, render_table(table))
    text = replace_between(text, _COUNTS_BEGIN, _COUNTS_END,
                           f"{_COUNTS_BEGIN}\n{render_counts(table)}\n{_COUNTS_END}")
    begin, end = _section_markers(DTYPE)
    return replace_between(text, begin, end, f"{begin}\n{render_notes(results)}\n{end}")


class OpInfoCompileTest(unittest.TestCase):
    def test_statuses_match_the_doc(self):
        torch._dynamo.config.recompile_limit = 64
        torch._dynamo.config.accumulated_recompile_limit = 1 << 20
        dtype = opinfo_compile.DTYPES[DTYPE]
        results = collections.OrderedDict()
        start = time.time()
        for name, op in opinfo_compile.entries().items():
            status, message, _, _ = opinfo_compile.run_entry(op, dtype, SAMPLES)
            results[name] = classify(name, status, message)
        elapsed = time.time() - start
        counts = collections.Counter(s for s, _ in results.values())
        print(f"{DTYPE}: {dict(counts)} in {elapsed:.0f}s ({SAMPLES} samples per entry)",
              file=sys.stderr)

        path = workspace_doc(DOC)
        with open(path) as f:
            text = f.read()
        if os.environ.get("RBLN_OPINFO_COMPILE_UPDATE") == "1":
            if not os.environ.get("BUILD_WORKSPACE_DIRECTORY"):
                self.fail("RBLN_OPINFO_COMPILE_UPDATE=1 needs `bazel run` (to write the source tree)")
            with open(path, "w") as f:
                f.write(update_doc(text, results))
            print(f"updated the {DTYPE} column of {path}", file=sys.stderr)
            return
        expected = {name: row.get(DTYPE, "-") for name, row in parse_table(text).items()}
        changed = []
        for name in sorted(set(expected) | set(results)):
            want = expected.get(name, "-")
            got, note = results.get(name, ("-", ""))
            if want != got:
                changed.append(f"  {name}: doc says {want}, now {got}" + (f" ({note})" if note else ""))
        self.assertFalse(
            changed,
            f"{len(changed)} OpInfo entries changed status in {DTYPE} (update {DOC} with "
            f"RBLN_OPINFO_COMPILE_UPDATE=1 bazel run //rbln/torch/python/tests:opinfo_compile_{DTYPE}_test):\n"
            + "\n".join(changed))


if __name__ == "__main__":
    unittest.main()
