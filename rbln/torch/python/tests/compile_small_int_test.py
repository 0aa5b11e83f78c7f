"""torch.compile(backend="rbln") on uint8, int8 and int16 (issue 30 item 4).

uint8 image inputs and int8 weights are what deployment pipelines feed an
NPU. These dtypes are device dtypes of the IR: stored narrow, computed in
int32 (the frontend's ComputeType), so arithmetic wraps as PyTorch's does
and uint8 compares, divides and converts as unsigned. Each function here
compiles into one device program with no host op and gives the CPU's
results bit for bit (integer results) or within fp16 tolerance; type
promotion (uint8 with int8 -> int16, a float scalar -> float32, ...) is the
CPU's.
"""
# spec: J1, J6

import sys

import pytest
import torch
import torch._dynamo

import torch_rbln  # noqa: F401
from rbln_test_util import fresh_dynamo  # noqa: F401 (fixture)

DEV = "rbln:0"
SMALL_INTS = [torch.uint8, torch.int8, torch.int16]

pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def compiled(fn):
    return torch.compile(fn, backend="rbln", dynamic=False, fullgraph=True,
                         options={"host_ops": "none"})


def full_range(dtype, shape, gen, low=None, high=None):
    info = torch.iinfo(dtype)
    low = info.min if low is None else low
    high = info.max if high is None else high
    return torch.randint(low, high + 1, shape, generator=gen, dtype=torch.int64).to(dtype)


def run_both(fn, *args):
    """fn on the CPU and compiled on rbln; asserts one device program."""
    want = fn(*args)
    got = compiled(fn)(*(a.to(DEV) for a in args))
    (graph,) = torch.rbln.compiled_programs()
    report = graph.inspect()
    assert report["host_ops"] == [], report["host_ops"]
    assert len(report["programs"]) == 1
    return want, got


def assert_same(want, got):
    for w, g in zip(want, got):
        assert g.device.type == "rbln"
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
        g = g.cpu()
        if w.dtype.is_floating_point:
            torch.testing.assert_close(g, w)
        else:
            assert torch.equal(g, w), (w, g)


def arithmetic(a, b, s):
    return (a + b, a - b, a * b, a * 3 + 7, -a, a.abs(), a & b, a | b, a ^ b, ~a,
            a << s, a >> s, torch.maximum(a, b), torch.minimum(a, b), a.clamp(-5, 100),
            torch.where(a > b, a, b), a < b, a == b, a >= 3)


@pytest.mark.parametrize("dtype", SMALL_INTS)
def test_arithmetic_wraps_like_the_cpu(dtype):
    gen = torch.Generator().manual_seed(0)
    a, b = full_range(dtype, (4, 64), gen), full_range(dtype, (4, 64), gen)
    s = full_range(dtype, (4, 64), gen, 0, 7)  # shift counts
    assert_same(*run_both(arithmetic, a, b, s))


def division(a, b):
    return a / b, a // b, a % b, torch.div(a, b, rounding_mode="trunc")


@pytest.mark.parametrize("dtype", SMALL_INTS)
def test_division_and_remainder(dtype):
    gen = torch.Generator().manual_seed(1)
    a = full_range(dtype, (2, 64), gen)
    b = full_range(dtype, (2, 64), gen, 1, 9)  # no zero divisor
    if dtype.is_signed:
        b = torch.where(torch.arange(64) % 2 == 0, b, -b).to(dtype)
    assert_same(*run_both(division, a, b))


def promotions(u8, i8, i16, i32, f16):
    return (u8 + i8, u8 + i16, i8 * i16, u8 - i32, u8 * 2.5, i8 + f16, i16 * f16,
            u8 + True, (u8 > 100) & (i8 < 0))


def test_type_promotion_is_the_cpus():
    gen = torch.Generator().manual_seed(2)
    args = (full_range(torch.uint8, (64,), gen), full_range(torch.int8, (64,), gen),
            full_range(torch.int16, (64,), gen), full_range(torch.int32, (64,), gen, -1000, 1000),
            torch.randn(64, generator=gen).half())
    want, got = run_both(promotions, *args)
    assert [w.dtype for w in want] == [torch.int16, torch.int16, torch.int16, torch.int32,
                                       torch.float32, torch.float16, torch.float16,
                                       torch.uint8, torch.bool]
    assert_same(want, got)


def casts(x, u8, i8, i16):
    return (x.abs().byte(), x.char(), (x * 100).short(), u8.half(), u8.bfloat16(), u8.float(),
            i8.half(), i16.float(), u8.bool(), (u8 > 7).byte(), u8.to(torch.int8), i16.to(torch.uint8),
            u8.long(), i8.int())


def test_casts_to_and_from_small_ints():
    gen = torch.Generator().manual_seed(3)
    x = (torch.randn(3, 64, generator=gen) * 50).clamp(-127, 127).half()
    args = (x, full_range(torch.uint8, (3, 64), gen), full_range(torch.int8, (3, 64), gen),
            full_range(torch.int16, (3, 64), gen))
    assert_same(*run_both(casts, *args))


def reductions(a):
    return a.sum(), a.sum(1), a.amax(1), a.amin(0), a.argmax(1), a.cumsum(1), a.float().mean(1)


@pytest.mark.parametrize("dtype", SMALL_INTS)
def test_reductions(dtype):
    gen = torch.Generator().manual_seed(4)
    assert_same(*run_both(reductions, full_range(dtype, (4, 64), gen)))


def movement(a, idx):
    return (torch.cat([a, a.flip(0)], 1), a.t().contiguous(), a.index_select(1, idx.view(-1)),
            a.gather(1, idx.expand(a.shape[0], -1)), torch.nn.functional.pad(a, (1, 2)), a[:, ::2])


@pytest.mark.parametrize("dtype", SMALL_INTS)
def test_data_movement(dtype):
    gen = torch.Generator().manual_seed(5)
    a = full_range(dtype, (4, 64), gen)
    idx = torch.randint(0, 64, (1, 16), generator=gen)
    assert_same(*run_both(movement, a, idx))


def preprocess(image, mean, std):
    # A uint8 HWC image batch to normalised NCHW float16, as a vision pipeline does.
    x = image.permute(0, 3, 1, 2).float() / 255
    return ((x - mean) / std).half(),


def test_uint8_image_preprocessing():
    gen = torch.Generator().manual_seed(6)
    image = full_range(torch.uint8, (2, 8, 8, 3), gen)
    mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    assert_same(*run_both(preprocess, image, mean, std))


def int8_linear(x, w_int8, scale):
    # Weight-only int8 quantisation: dequantise per output channel, then a GEMM.
    w = w_int8.to(torch.float16) * scale
    return x @ w.t(),


def test_int8_weight_dequantisation():
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(4, 64, generator=gen).half()
    w = full_range(torch.int8, (64, 64), gen)
    scale = (torch.rand(64, 1, generator=gen) / 64).half()
    want, got = run_both(int8_linear, x, w, scale)
    torch.testing.assert_close(got[0].cpu().float(), want[0].float(), rtol=1e-2, atol=1e-2)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
