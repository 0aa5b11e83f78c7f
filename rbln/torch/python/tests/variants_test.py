"""out= and in-place variants of the compiled-kernel ops, compared with the CPU."""
# spec: G1, K4

import sys

import pytest
import torch

DTYPES = [torch.float16, torch.bfloat16]


def counters():
    return torch.rbln.counters()


def _pos(*shape):
    return torch.rand(*shape) + 0.5


def _rand(*shape):
    return torch.randn(*shape)


def _mask(*shape):
    return torch.rand(*shape) > 0.5


def _index(n, k):
    return torch.randperm(n)[:k]


# (variant name, input makers (float tensors are cast to the dtype under
# test), out= call, in-place call). Each call takes the inputs and, for out=,
# the destination tensor; an in-place call mutates its first input.
def _binary(name, pos=False):
    fn = getattr(torch, name)
    make = _pos if pos else _rand
    return [
        (f"{name}.out", [make(4, 64), make(4, 64)], lambda a, b, out: fn(a, b, out=out), None),
        (f"{name}_.Tensor", [make(4, 64), make(4, 64)], None,
         lambda a, b: getattr(a, name + "_")(b)),
        (f"{name}.Scalar_out", [make(4, 64)], lambda a, out: fn(a, 1.5, out=out), None),
        (f"{name}_.Scalar", [make(4, 64)], None, lambda a: getattr(a, name + "_")(1.5)),
    ]


def _unary(name, pos=False, inplace=True):
    fn = getattr(torch, name, None) or getattr(torch.nn.functional, name)
    make = _pos if pos else _rand
    cases = [(f"{name}.out", [make(4, 64)], lambda a, out: fn(a, out=out), None)]
    if inplace:
        cases.append((f"{name}_", [make(4, 64)], None, lambda a: getattr(a, name + "_")()))
    return cases


def _compare(name):
    fn = getattr(torch, name)
    # The in-place forms (a half result, 1.0/0.0) are ATen composites over
    # the .out overloads with out=self: self is also an input, so the program
    # writes a temporary that is copied into self.
    return [
        (f"{name}_.Tensor", [_rand(4, 64), _rand(4, 64)], None,
         lambda a, b: getattr(a, name + "_")(b)),
        (f"{name}_.Scalar", [_rand(4, 64)], None, lambda a: getattr(a, name + "_")(0.25)),
        (f"{name}.Tensor_out", [_rand(4, 64), _rand(4, 64)],
         lambda a, b, out: fn(a, b, out=out), None),
        (f"{name}.Scalar_out", [_rand(4, 64)], lambda a, out: fn(a, 0.25, out=out), None),
    ]


CASES = (
    _binary("add") + _binary("sub") + _binary("mul") + _binary("div", pos=True)
    + [
        ("div.out_mode", [_rand(4, 64), _pos(4, 64)],
         lambda a, b, out: torch.div(a, b, rounding_mode="floor", out=out), None),
        ("div_.Tensor_mode", [_rand(4, 64), _pos(4, 64)], None,
         lambda a, b: a.div_(b, rounding_mode="trunc")),
        ("pow.Tensor_Tensor_out", [_pos(4, 64), _rand(4, 64)],
         lambda a, b, out: torch.pow(a, b, out=out), None),
        ("pow_.Tensor", [_pos(4, 64), _rand(4, 64)], None, lambda a, b: a.pow_(b)),
        ("pow.Tensor_Scalar_out", [_pos(4, 64)], lambda a, out: torch.pow(a, 2.0, out=out), None),
        ("pow_.Scalar", [_pos(4, 64)], None, lambda a: a.pow_(2.0)),
        ("lerp.Scalar_out", [_rand(4, 64), _rand(4, 64)],
         lambda a, b, out: torch.lerp(a, b, 0.1, out=out), None),
        ("lerp_.Scalar", [_rand(4, 64), _rand(4, 64)], None, lambda a, b: a.lerp_(b, 0.9)),
        ("div.Scalar_mode_out", [_rand(4, 64)],
         lambda a, out: torch.div(a, 0.3, rounding_mode="floor", out=out), None),
        ("div_.Scalar_mode", [_rand(4, 64)], None, lambda a: a.div_(0.3, rounding_mode="trunc")),
        # max/min of two tensors are maximum/minimum.
        ("max.out", [_rand(4, 64), _rand(4, 64)], lambda a, b, out: torch.max(a, b, out=out), None),
        ("min.out", [_rand(4, 64), _rand(4, 64)], lambda a, b, out: torch.min(a, b, out=out), None),
        ("maximum.out", [_rand(4, 64), _rand(4, 64)],
         lambda a, b, out: torch.maximum(a, b, out=out), None),
        ("minimum.out", [_rand(4, 64), _rand(4, 64)],
         lambda a, b, out: torch.minimum(a, b, out=out), None),
    ]
    + _compare("eq") + _compare("ne") + _compare("lt") + _compare("le") + _compare("gt")
    + _compare("ge")
    + _unary("abs") + _unary("neg") + _unary("ceil") + _unary("floor")
    + _unary("log", pos=True) + _unary("rsqrt", pos=True) + _unary("sigmoid")
    + _unary("exp") + _unary("sqrt", pos=True) + _unary("tanh")
    + [
        ("silu.out", [_rand(4, 64)], lambda a, out: torch._C._nn.silu(a, out=out), None),
        ("silu_", [_rand(4, 64)], None, lambda a: torch.nn.functional.silu(a, inplace=True)),
        ("relu.out", [_rand(4, 64)], lambda a, out: torch.ops.aten.relu.out(a, out=out), None),
        ("relu_", [_rand(4, 64)], None, lambda a: a.relu_()),
        ("gelu.out", [_rand(4, 64)], lambda a, out: torch._C._nn.gelu(a, out=out), None),
        ("gelu_", [_rand(4, 64)], None, lambda a: torch._C._nn.gelu_(a, approximate="tanh")),
        ("logical_not.out", [_mask(4, 64)], lambda a, out: torch.logical_not(a, out=out), None),
        ("logical_not.out(float out)", [_rand(4, 64)],
         lambda a, out: torch.logical_not(a, out=out), None),
        ("logical_not_", [_rand(4, 64)], None, lambda a: a.logical_not_()),
        ("logical_and.out", [_mask(4, 64), _mask(4, 64)],
         lambda a, b, out: torch.logical_and(a, b, out=out), None),
        ("logical_or.out(float out)", [_rand(4, 64), _mask(4, 64)],
         lambda a, b, out: torch.logical_or(a, b, out=out), None),
        ("logical_and_", [_rand(4, 64), _rand(4, 64)], None, lambda a, b: a.logical_and_(b)),
        ("clamp.out", [_rand(4, 64)], lambda a, out: torch.clamp(a, -0.5, 0.5, out=out), None),
        ("clamp_", [_rand(4, 64)], None, lambda a: a.clamp_(min=-0.25)),
        ("masked_fill.Scalar_out", [_rand(4, 64), _mask(4, 64)],
         lambda a, m, out: torch.ops.aten.masked_fill.Scalar_out(a, m, -2.0, out=out), None),
        ("masked_fill_.Scalar", [_rand(4, 64), _mask(4, 64)], None,
         lambda a, m: a.masked_fill_(m, -2.0)),
        ("mm.out", [_rand(64, 64), _rand(64, 64)], lambda a, b, out: torch.mm(a, b, out=out), None),
        ("bmm.out", [_rand(2, 64, 64), _rand(2, 64, 64)],
         lambda a, b, out: torch.bmm(a, b, out=out), None),
        ("addmm.out", [_rand(64, 64), _rand(64, 64), _rand(64, 64)],
         lambda c, a, b, out: torch.addmm(c, a, b, beta=0.5, alpha=2.0, out=out), None),
        ("addmm_", [_rand(64, 64), _rand(64, 64), _rand(64, 64)], None,
         lambda c, a, b: c.addmm_(a, b)),
        # torch.softmax(out=) is softmax.int_out, a composite over these.
        ("_softmax.out", [_rand(4, 64)],
         lambda a, out: torch.ops.aten._softmax.out(a, -1, False, out=out), None),
        ("_log_softmax.out", [_rand(4, 64)],
         lambda a, out: torch.ops.aten._log_softmax.out(a, -1, False, out=out), None),
        ("sum.IntList_out", [_rand(4, 64, 64)], lambda a, out: torch.sum(a, 1, out=out), None),
        # ATen composites over the registered out= overloads (sum.IntList_out,
        # mean.out, _softmax.out): they reach the compiled kernel too.
        ("sum.out", [_rand(4, 64, 64)],
         lambda a, out: torch.ops.aten.sum.out(a, dtype=a.dtype, out=out), None),
        ("mean.dtype_out", [_rand(4, 64, 64)],
         lambda a, out: torch.ops.aten.mean.dtype_out(a, dtype=a.dtype, out=out), None),
        ("softmax.int_out", [_rand(4, 64)], lambda a, out: torch.softmax(a, -1, out=out), None),
        ("mean.out", [_rand(4, 64, 64)],
         lambda a, out: torch.mean(a, 1, keepdim=True, out=out), None),
        ("amax.out", [_rand(4, 64, 64)], lambda a, out: torch.amax(a, 1, out=out), None),
        ("amin.out", [_rand(4, 64, 64)], lambda a, out: torch.amin(a, 0, out=out), None),
        ("max.unary_out", [_rand(4, 64)], lambda a, out: torch.ops.aten.max.unary_out(a, out=out),
         None),
        ("min.unary_out", [_rand(4, 64)], lambda a, out: torch.ops.aten.min.unary_out(a, out=out),
         None),
        ("cat.out", [_rand(2, 64), _rand(3, 64)],
         lambda a, b, out: torch.cat([a, b], 0, out=out), None),
        # Index lengths and reduced dims keep every last dim a multiple of
        # 64 (SPEC H3's alignment check).
        ("index_select.out", [_rand(64, 128), _index(128, 64)],
         lambda a, i, out: torch.index_select(a, 1, i, out=out), None),
        ("index_copy.out", [_rand(64, 128), _index(128, 64), _rand(64, 64)],
         lambda a, i, s, out: torch.index_copy(a, 1, i, s, out=out), None),
        ("index_copy_", [_rand(64, 128), _index(128, 64), _rand(64, 64)], None,
         lambda a, i, s: a.index_copy_(1, i, s)),
        ("argmax.out", [_rand(4, 64)], lambda a, out: torch.argmax(a, 0, out=out), None),
        ("argmin.out", [_rand(4, 64)], lambda a, out: torch.argmin(a, 0, out=out), None),
    ]
)


def _cast(t, dtype):
    return t.to(dtype) if t.is_floating_point() else t


def _run(case, dtype, device, out_layout=None):
    """The call on `device`; returns (result, destination, inputs)."""
    _, makers, out_call, inplace_call = case
    inputs = [_cast(t, dtype).to(device) for t in makers]
    if out_call is not None:
        # The destination's shape and dtype are the CPU result's.
        empty = torch.empty(0, dtype=_out_dtype(case, dtype))
        ref = out_call(*[t.cpu() for t in inputs], out=empty)
        if out_layout == "transposed" and ref.dim() == 2:
            out = torch.empty(ref.shape[::-1], dtype=ref.dtype, device=device).t()
        elif out_layout == "transposed":
            # Not 2-D: every other element of a larger buffer.
            flat = torch.empty(2 * ref.numel(), dtype=ref.dtype, device=device)[::2]
            out = flat.view(ref.shape) if ref.dim() == 1 else flat.as_strided(
                ref.shape, [2 * s for s in ref.contiguous().stride()])
        elif out_layout == "sliced":
            # The first half of each row of a wider buffer.
            wide = tuple(ref.shape[:-1]) + (2 * ref.shape[-1],)
            out = torch.empty(wide, dtype=ref.dtype, device=device)[..., ref.shape[-1]:]
        else:
            out = torch.empty(ref.shape, dtype=ref.dtype, device=device)
        result = out_call(*inputs, out=out)
        return result, out, inputs
    result = inplace_call(*inputs)
    return result, inputs[0], inputs


def _out_dtype(case, dtype):
    name = case[0]
    if name in ("logical_not.out", "logical_and.out") or name.split(".")[0] in ("eq", "ne", "lt", "le", "gt", "ge"):
        return torch.bool
    if name.startswith(("argmax", "argmin")):
        return torch.int64
    return dtype


def _check(case, dtype, out_layout=None):
    torch.manual_seed(0)
    before = counters()
    result, dst, inputs = _run(case, dtype, "rbln", out_layout)
    after = counters()
    torch.manual_seed(0)
    # CPU's values are those of a contiguous destination: CPU's own
    # _softmax.out writes a transposed out= as if it were contiguous.
    ref, ref_dst, _ = _run(case, dtype, "cpu")

    def delta(key):
        return after.get(key, 0) - before.get(key, 0)

    assert delta("dispatch/compiled_runs") >= 1, case[0]
    assert delta("dispatch/cpu_fallback") == 0, (case[0], {
        k: v - before.get(k, 0) for k, v in after.items()
        if k.startswith("dispatch/cpu_fallback") and v != before.get(k, 0)})
    assert result is dst, case[0]
    assert result.data_ptr() == dst.data_ptr()
    assert result.untyped_storage().data_ptr() == dst.untyped_storage().data_ptr()
    assert dst.device.type == "rbln"
    torch.testing.assert_close(dst.cpu(), ref_dst, rtol=1e-2, atol=1e-2)
    if case[2] is None:
        # In place: the input the op wrote is the one the caller holds.
        assert dst is inputs[0]
    return dst


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_variant_matches_cpu_in_place_of_destination(case, dtype):
    # spec: G1, K4
    _check(case, dtype)


# Not here: 0-dim results (nothing to lay out), and softmax.int_out, whose
# composite computes a non-contiguous out= functionally and copies itself.
OUT_CASES = [c for c in CASES if c[2] is not None and c[0] not in (
    "max.unary_out", "min.unary_out", "sum.out", "mean.dtype_out", "softmax.int_out")]


@pytest.mark.parametrize("layout", ["transposed", "sliced"])
@pytest.mark.parametrize("case", OUT_CASES[:: 3], ids=[c[0] for c in OUT_CASES[:: 3]])
def test_non_contiguous_out_matches_cpu(case, layout):
    # spec: K4 -- a non-contiguous out= gets a temporary and one device copy.
    before = counters()
    dst = _check(case, torch.float16, layout)
    after = counters()
    # A 1-D slice is contiguous at an offset: the program's output buffer.
    key = "dispatch/out_in_place" if dst.is_contiguous() else "dispatch/out_via_temporary"
    assert after.get(key, 0) > before.get(key, 0)


def test_transposed_inplace_self_matches_cpu():
    # spec: K4 -- a transposed self written in place keeps CPU's values.
    for name, inplace in [("relu_", lambda a: a.relu_()), ("mul_.Scalar", lambda a: a.mul_(3.0)),
                          ("clamp_", lambda a: a.clamp_(max=0.1)),
                          ("add_.Tensor", None)]:
        base = torch.randn(64, 64).half()
        other = torch.randn(64, 64).half()
        x = base.to("rbln")
        view = x.t()
        before = counters()
        if inplace is None:
            got = view.add_(other.to("rbln"))
            view_cpu = base.clone().t().add_(other)
        else:
            got = inplace(view)
            view_cpu = inplace(base.clone().t())
        after = counters()
        assert got is view, name
        assert after.get("dispatch/compiled_runs", 0) > before.get("dispatch/compiled_runs", 0)
        assert after.get("dispatch/cpu_fallback", 0) == before.get("dispatch/cpu_fallback", 0)
        torch.testing.assert_close(view.cpu(), view_cpu, rtol=1e-2, atol=1e-2)
        torch.testing.assert_close(x.cpu(), view_cpu.t(), rtol=1e-2, atol=1e-2)


# Reached through ATen composites over a registered overload, not
# registered themselves.
COMPOSITES = {"sum.out", "mean.dtype_out", "softmax.int_out", "logical_not_",
              "logical_not.out(float out)", "logical_or.out(float out)", "logical_and_"} | {
    f"{op}_.{kind}" for op in ("eq", "ne", "lt", "le", "gt", "ge") for kind in ("Tensor", "Scalar")}


def test_every_tested_variant_has_an_rbln_kernel():
    # spec: G1 -- the names above are the registered overloads, so a test
    # passing is the compiled kernel's, not a composite's or the fallback's.
    for name, *_ in CASES:
        if name in COMPOSITES:
            continue
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{name}", "PrivateUse1"), name


def test_warm_hits_write_each_calls_destination():
    # spec: G2, K4 -- a repeated out=/in-place call hits the warm cache and
    # writes the destination of that call, not the first call's.
    a = torch.randn(4, 64).half()
    x = a.to("rbln")
    first = torch.empty(4, 64, dtype=torch.float16, device="rbln")
    second = torch.empty(4, 64, dtype=torch.float16, device="rbln")
    torch.abs(x, out=first)
    before = counters()
    got = torch.abs(-x, out=second)
    y = x.clone()
    y.relu_()
    y.relu_()
    after = counters()
    assert got is second
    assert after["dispatch/warm_hits"] - before.get("dispatch/warm_hits", 0) >= 2
    assert after.get("dispatch/cpu_fallback", 0) == before.get("dispatch/cpu_fallback", 0)
    torch.testing.assert_close(first.cpu(), a.abs(), rtol=0, atol=0)
    torch.testing.assert_close(second.cpu(), a.abs(), rtol=0, atol=0)
    torch.testing.assert_close(y.cpu(), a.relu(), rtol=0, atol=0)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))
