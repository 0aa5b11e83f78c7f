"""OpInfo conformance: PyTorch's own sample inputs, rbln against CPU.

For every op that has an rbln compiled kernel (issue 5's list), every sample
input of its OpInfo entries (`torch.testing._internal.common_methods_invocations
.op_db`) runs in float16 and bfloat16 on CPU and on rbln. The rbln result must
match within tolerance, or rbln must raise the same exception type as CPU. The
per-op table (samples, passed, ran compiled, fell back) is printed.

The device's narrow integer dtypes int8, uint8 and int16 (issue 30) run the
same entries where the CPU has a kernel for them: eager ops on them run as
int32 and int64 do (the CPU fallback; compiled kernels take the half types),
so these check that the narrow tensors reach the CPU kernels and come back
bit-exact.

The alignment, attention-length and storage-offset checks are switched off
(TORCH_RBLN_DEV_DISABLE_OP_CPU_FALLBACK) so that OpInfo's odd shapes reach the
compiled kernels instead of the CPU fallback; the checks themselves are tested
in dispatch_test.py.
"""
# spec: G1, G2, H2, H4, I3, K1

import os

os.environ.setdefault("TORCH_RBLN_DEV_DISABLE_OP_CPU_FALLBACK", "alignment,attention,storage_offset")

import pytest  # noqa: E402
import torch  # noqa: E402
from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402
from torch.utils._pytree import tree_map  # noqa: E402

# OpInfo names of the ops issue 5 lists as compiled kernels.
COMPILED_OPS = [
    "abs", "add", "addmm", "bmm", "ceil", "clamp", "div", "eq", "floor", "ge",
    "gt", "le", "log", "logical_not", "lt", "nn.functional.linear",
    "masked_fill", "max", "mean", "min", "mm", "mul", "ne", "neg", "pow",
    "rsqrt", "sigmoid", "nn.functional.silu", "nn.functional.relu",
    "nn.functional.gelu", "softmax", "log_softmax", "sub", "where", "cat",
    "index_copy", "index_select", "maximum", "minimum", "repeat_interleave",
    "arange", "clone", "fill", "sum", "amax", "amin", "argmax", "argmin",
    "nn.functional.scaled_dot_product_attention",
    "exp", "sqrt", "tanh", "logical_and", "logical_or", "lerp",
]
# Ops whose result sums or averages many terms: our kernels accumulate in
# float32 in a different order than ATen's CPU kernels.
ACCUMULATING = {
    "addmm", "bmm", "mm", "nn.functional.linear", "mean", "sum", "softmax",
    "log_softmax", "nn.functional.scaled_dot_product_attention",
}
DTYPES = [torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int16]


def entries():
    for op in op_db:
        if op.name in COMPILED_OPS and "complex" not in op.variant_test_name:
            name = op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")
            yield pytest.param(op, id=name)


def to_rbln(x):
    return x.to("rbln") if isinstance(x, torch.Tensor) else x


def to_cpu(x):
    return x.cpu() if isinstance(x, torch.Tensor) else x


def describe(sample):
    """A short form of a sample: tensor shapes and strides, other values."""

    def one(x):
        if isinstance(x, torch.Tensor):
            strides = "" if x.is_contiguous() else f" strides={tuple(x.stride())}"
            return f"{str(x.dtype).replace('torch.', '')}{list(x.shape)}{strides}"
        if isinstance(x, (list, tuple)):
            return "[" + ", ".join(one(y) for y in x) + "]"
        return repr(x)

    args = [one(sample.input)] + [one(a) for a in sample.args]
    args += [f"{k}={one(v)}" for k, v in sample.kwargs.items()]
    return "(" + ", ".join(args) + ")"


def tolerance(op, dtype):
    if not dtype.is_floating_point:
        # Eager integer ops run the CPU's kernels (the fallback): bit-exact.
        return {"atol": 0, "rtol": 0}
    if op.name in ACCUMULATING:
        return {"atol": 2e-2, "rtol": 2e-2} if dtype == torch.float16 else {
            "atol": 6e-2, "rtol": 6e-2}
    # Element-wise kernels compute in float32 and round once, as ATen does.
    return {"atol": 1e-3, "rtol": 1e-3} if dtype == torch.float16 else {
        "atol": 1e-2, "rtol": 1.6e-2}


REPORT = {}


@pytest.mark.parametrize("op", list(entries()))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_op_matches_cpu(op, dtype):
    if dtype not in op.supported_dtypes("cpu"):
        pytest.skip(f"{op.name} has no {dtype} CPU kernel")
    failures = []
    samples = compiled = fell_back = 0
    for sample in op.sample_inputs("cpu", dtype, requires_grad=False):
        samples += 1
        args = (sample.input, *sample.args)
        try:
            expected = op(*args, **sample.kwargs)
            cpu_error = None
        except Exception as e:  # noqa: BLE001 -- compare the error type
            cpu_error = e
        rbln_args = tree_map(to_rbln, args)
        rbln_kwargs = tree_map(to_rbln, sample.kwargs)
        before = torch.rbln.counters()
        try:
            got = tree_map(to_cpu, op(*rbln_args, **rbln_kwargs))
            rbln_error = None
        except Exception as e:  # noqa: BLE001
            rbln_error = e
        after = torch.rbln.counters()
        runs = after.get("dispatch/compiled_runs", 0) - before.get("dispatch/compiled_runs", 0)
        fallbacks = after.get("dispatch/cpu_fallback", 0) - before.get("dispatch/cpu_fallback", 0)
        compiled += runs > 0
        fell_back += fallbacks > 0
        if cpu_error is not None:
            if rbln_error is None or not isinstance(rbln_error, type(cpu_error)):
                failures.append(f"{describe(sample)}: CPU raised {type(cpu_error).__name__}, "
                                f"rbln {'returned' if rbln_error is None else repr(rbln_error)}")
            continue
        if rbln_error is not None:
            failures.append(f"{describe(sample)}: rbln raised {str(rbln_error)[:300]}")
            continue
        try:
            torch.testing.assert_close(got, expected, equal_nan=True, check_device=False,
                                       **tolerance(op, dtype))
        except AssertionError as e:
            failures.append(f"{describe(sample)}: {' '.join(str(e).splitlines()[0:4])}")
    REPORT[(op.name, op.variant_test_name, str(dtype))] = (samples, samples - len(failures),
                                                          compiled, fell_back)
    print(f"{op.name}.{op.variant_test_name} {dtype}: {samples} samples, "
          f"{samples - len(failures)} passed, {compiled} ran compiled kernels, "
          f"{fell_back} used the CPU fallback")
    assert not failures, "\n".join(failures[:5])


def test_report():
    # Runs last (pytest keeps file order): the per-op pass counts.
    if not REPORT:
        pytest.skip("no op ran")
    print(f"\n{'op':48s} {'dtype':15s} {'samples':>7s} {'passed':>6s} {'compiled':>8s} {'fallback':>8s}")
    for (name, variant, dtype), (n, ok, comp, fb) in sorted(REPORT.items()):
        label = name + (f".{variant}" if variant else "")
        print(f"{label:48s} {dtype:15s} {n:7d} {ok:6d} {comp:8d} {fb:8d}")


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-v", "-s", "-p", "no:cacheprovider"]))
