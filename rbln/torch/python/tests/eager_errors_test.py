"""Errors of rbln ops have the CPU's exception type and message.

Where a Python meta kernel (torch._refs) refuses the arguments with an error
of its own -- amax/amin over an empty dim on the types the device computes,
bool floor division -- the shim lets the CPU kernel decide, so the caller sees
exactly what PyTorch CPU raises. Integer division by zero inside a compiled
graph raises RuntimeError("ZeroDivisionError ...") as the CPU does."""
# spec: G1, I1, I3

import sys

import pytest
import torch



def cpu_and_rbln_errors(fn, *cpu_args):
    """(CPU's exception, rbln's exception) of fn on the args and their rbln copies."""
    errors = []
    for args in (cpu_args, tuple(a.to("rbln") for a in cpu_args)):
        with pytest.raises(Exception) as info:
            fn(*args)
        errors.append(info.value)
    return errors


def assert_same_error(fn, *cpu_args):
    cpu, rbln = cpu_and_rbln_errors(fn, *cpu_args)
    assert type(rbln) is type(cpu), (type(rbln), rbln, type(cpu), cpu)
    assert str(rbln) == str(cpu)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.bool, torch.float32], ids=str)
@pytest.mark.parametrize("op", ["amax", "amin"])
@pytest.mark.parametrize(
    "shape,dim",
    [((0, 3), 0), ((2, 0), -1), ((0, 3), (0, 1)), ((0, 64), ()), ((0,), 0)],
    ids=str,
)
def test_reduction_over_an_empty_dim_raises_as_on_cpu(dtype, op, shape, dim):
    # CPU: IndexError "amax(): Expected reduction dim 0 to have non-zero
    # size." (RuntimeError for dim=() on an empty input).
    x = torch.zeros(shape, dtype=dtype)
    assert_same_error(lambda t: getattr(torch, op)(t, dim), x)
    assert_same_error(lambda t: getattr(torch, op)(t, dim, keepdim=True), x)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_reduction_over_a_nonempty_dim_of_an_empty_input_still_works(dtype):
    x = torch.zeros(0, 64, dtype=dtype)
    got = torch.amax(x.to("rbln"), 1)
    assert got.device.type == "rbln" and got.shape == (0,)
    y = torch.randn(4, 64).to(dtype)
    assert torch.equal(torch.amin(y.to("rbln"), 0).cpu(), torch.amin(y, 0))


@pytest.mark.parametrize(
    "fn",
    [
        lambda a, b: torch.div(a, b, rounding_mode="floor"),
        lambda a, b: torch.div(a, b, rounding_mode="trunc"),
        lambda a, b: torch.floor_divide(a, b),
        lambda a, b: a // b,
        lambda a, b: a.div_(b, rounding_mode="floor"),
    ],
    ids=["div_floor", "div_trunc", "floor_divide", "floordiv_operator", "div_floor_inplace"],
)
def test_bool_floor_division_raises_as_on_cpu(fn):
    # CPU: NotImplementedError "\"div_floor_cpu\" not implemented for 'Bool'".
    a = torch.tensor([True, False, True] * 64)
    b = torch.tensor([True, True, False] * 64)
    assert_same_error(fn, a, b)
    ar = a.to("rbln")
    with pytest.raises(NotImplementedError):
        fn(ar, b.to("rbln"))
    assert torch.equal(ar.cpu(), a)  # nothing written


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64], ids=str)
@pytest.mark.parametrize("mode", ["floor", "trunc"])
def test_compiled_integer_division_by_zero_raises_as_on_cpu(dtype, mode):
    def compute(a, b):
        return torch.div(a * 2, b, rounding_mode=mode) + 1

    a = torch.tensor([7, -7, 3, 5], dtype=dtype)
    zero = torch.tensor([2, 2, 0, 1], dtype=dtype)
    with pytest.raises(RuntimeError, match="^ZeroDivisionError$"):
        compute(a, zero)
    f = torch.compile(compute, backend="rbln", dynamic=False)
    with pytest.raises(RuntimeError, match=r"ZeroDivisionError: integer division by zero in div"):
        f(a.to("rbln"), zero.to("rbln"))
    # The same program divides when no divisor is zero.
    nonzero = torch.tensor([2, 2, -3, 1], dtype=dtype)
    assert torch.equal(f(a.to("rbln"), nonzero.to("rbln")).cpu(), compute(a, nonzero))


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
