"""Dtype conversions between rbln tensors without the host bounce
(device_cast.h): between float16, bfloat16 and float32 a device-resident
source is converted by a compiled cast program on the device (views read in
place, strided destinations through the DMA engine), a host-latest source in
host memory with no transfer; integer and bool conversions keep K3's bounce
(SPEC N4). Values are bit-exact against the CPU's conversion."""
# spec: K2, K3, D2, G1

import sys

import pytest
import torch

from rbln_test_util import delta

DEV = "rbln:0"
FLOATS = [torch.float16, torch.bfloat16, torch.float32]
PAIRS = [(a, b) for a in FLOATS for b in FLOATS if a != b]


def special_values(dtype):
    """128x128 values with the cases a conversion can get wrong: rounding
    ties, overflow to inf, subnormals, NaN, infinities, signed zeros."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(128, 128, generator=g, dtype=torch.float64) * 100
    x[0, :8] = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0, 0.0,
                             70000.0, -1e-7, 3.0e38], dtype=torch.float64)
    x[1, :4] = torch.tensor([1 + 2 ** -11, 1 + 3 * 2 ** -11, 1 + 2 ** -8, 6e-8],
                            dtype=torch.float64)
    return x.to(dtype)


def on_device(x):
    """`x` on rbln with its latest bytes in device memory (the output of a
    device op)."""
    d = x.to(DEV)
    d = d.clone()  # clone copies with the DMA engine: device-latest
    assert torch.rbln._storage_info(d)["state"] == "device-latest"
    return d


def bit_equal(got, want):
    """The same bits, except that any NaN equals any NaN (ATen's vectorized
    float32 -> bfloat16 conversion makes 0xffff, its scalar one 0x7fc0)."""
    assert got.dtype == want.dtype and got.shape == want.shape
    nan = want.isnan()
    if not torch.equal(got.isnan(), nan):
        return False
    bits = torch.int32 if want.dtype == torch.float32 else torch.int16
    return torch.equal(got[~nan].view(bits), want[~nan].view(bits))


def region(fn):
    with torch.rbln.explain() as r:
        out = fn()
    return out, r.to_dict()


@pytest.mark.parametrize("src_dtype,dst_dtype", PAIRS, ids=str)
def test_device_resident_source_converts_on_the_device(src_dtype, dst_dtype):
    host = special_values(src_dtype)
    src = on_device(host)
    src.to(dst_dtype)  # warm-up: the cast program compiles once per shape
    c0 = torch.rbln.counters()
    out, facts = region(lambda: src.to(dst_dtype))
    c1 = torch.rbln.counters()
    assert facts["verdict"] == "clean", facts["signals"]
    assert facts["runtime"]["physical_d2h"]["count"] == 0
    assert facts["runtime"]["push"]["count"] == 0
    assert facts["runtime"]["program_runs"] == 1
    assert delta(c0, c1, "dispatch/device_casts") == 1
    assert delta(c0, c1, "runtime/host_bounce_copies") == 0
    assert out.device == torch.device(DEV) and out.dtype == dst_dtype
    assert torch.rbln._storage_info(out)["state"] == "device-latest"
    assert bit_equal(out.cpu(), host.to(dst_dtype))


@pytest.mark.parametrize("src_dtype,dst_dtype", PAIRS, ids=str)
def test_host_latest_source_converts_in_host_memory(src_dtype, dst_dtype):
    # spec: D2 -- the source's bytes are on the host: no transfer at all.
    host = special_values(src_dtype)
    src = host.to(DEV)
    assert torch.rbln._storage_info(src)["state"] == "host-latest"
    c0 = torch.rbln.counters()
    out, facts = region(lambda: src.to(dst_dtype))
    c1 = torch.rbln.counters()
    assert facts["verdict"] == "clean", facts["signals"]
    assert facts["runtime"]["physical_d2h"]["count"] == 0
    assert facts["runtime"]["push"]["count"] == 0
    assert facts["runtime"]["program_runs"] == 0
    assert delta(c0, c1, "dispatch/host_casts") == 1
    assert torch.rbln._storage_info(out)["state"] == "host-latest"
    assert bit_equal(out.cpu(), host.to(dst_dtype))


VIEWS = {
    "transpose": lambda x: x.t(),
    "slice_with_offset": lambda x: x[3:, 5:69],
    "every_other_column": lambda x: x[:, ::2],
    "select": lambda x: x[7],
    "permuted_3d": lambda x: x.view(8, 16, 128).permute(2, 0, 1),
}


@pytest.mark.parametrize("view", list(VIEWS))
def test_view_sources_are_read_in_place(view):
    # spec: K2 -- the view is replayed on the source's storage span inside
    # the cast program: no contiguous copy, no bounce.
    host = special_values(torch.float32)
    src = VIEWS[view](on_device(host))
    want = VIEWS[view](host).to(torch.bfloat16)
    src.to(torch.bfloat16)
    c0 = torch.rbln.counters()
    out, facts = region(lambda: src.to(torch.bfloat16))
    c1 = torch.rbln.counters()
    assert facts["verdict"] == "clean", facts["signals"]
    assert facts["runtime"]["physical_d2h"]["count"] == 0
    assert delta(c0, c1, "dispatch/device_casts") == 1
    assert bit_equal(out.cpu(), want.contiguous())


def test_broadcast_and_strided_destination():
    # copy_ broadcasts its source; a destination with gaps keeps its gap
    # bytes (the cast writes a temporary the DMA engine copies into place).
    row = on_device(special_values(torch.float16)[:1])  # [1, 128]
    big = on_device(torch.full((128, 256), 7.0))
    c0 = torch.rbln.counters()
    big[:, ::2].copy_(row)
    c1 = torch.rbln.counters()
    expected = torch.full((128, 256), 7.0)
    expected[:, ::2] = special_values(torch.float16)[:1].float()
    assert bit_equal(big.cpu(), expected)
    assert delta(c0, c1, "dispatch/device_casts") == 1
    assert delta(c0, c1, "runtime/host_bounce_copies") == 0
    assert delta(c0, c1, "runtime/dma_d2h_copies") == 0


def test_module_half_and_back_without_bounce():
    # The model-suite pattern: model.to("rbln").half(), then a device-resident
    # module converted to bfloat16 and back to float32.
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.LayerNorm(128))
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.LayerNorm(128))
    model.load_state_dict(ref.state_dict())
    c0 = torch.rbln.counters()
    model.to(DEV).half()
    for p in model.parameters():
        p.data = p.data.clone()  # device-latest, as after a device op
    model.bfloat16().float()
    c1 = torch.rbln.counters()
    assert delta(c0, c1, "runtime/host_bounce_copies") == 0
    assert delta(c0, c1, "dispatch/host_casts") == 4  # the .half() of lazy parameters
    assert delta(c0, c1, "dispatch/device_casts") == 8  # bfloat16, then float32
    for got, want in zip(model.parameters(), ref.half().bfloat16().float().parameters()):
        assert bit_equal(got.detach().cpu(), want.detach())


def test_gradient_through_a_conversion():
    # The backward of x.float() is a float32 -> float16 conversion.
    x = on_device(special_values(torch.float16)[2:4]).requires_grad_()
    y = x.float() * 2.0  # float32 arithmetic runs on the CPU (SPEC D4)
    y.backward(torch.ones_like(y))
    assert x.grad.dtype == torch.float16
    assert torch.equal(x.grad.cpu(), torch.full((2, 128), 2.0, dtype=torch.float16))


def test_integer_conversions_keep_the_host_bounce():
    # spec: K3, N4 -- the seed converts int32 -> float16 through the host.
    ints = on_device(torch.arange(128 * 128, dtype=torch.int32).reshape(128, 128))
    c0 = torch.rbln.counters()
    out, facts = region(lambda: ints.to(torch.float16))
    c1 = torch.rbln.counters()
    assert facts["signals"]["host_bounce/d2d_copy"]["count"] == 1
    assert delta(c0, c1, "dispatch/device_casts") == 0
    assert torch.equal(out.cpu(), torch.arange(128 * 128, dtype=torch.float16).reshape(128, 128))


def test_overlapping_conversion_reads_its_source_first():
    # A float16 view of a float32 tensor's own bytes as the destination: a
    # device cast would overwrite what it has not read yet, so the copy
    # bounces, reading the whole source before it writes.
    a = on_device(torch.arange(64, dtype=torch.float32))
    b = a.view(torch.float16)  # 128 halves over the same bytes
    c0 = torch.rbln.counters()
    b[64:96].copy_(a[32:64])  # bytes 128..192 from bytes 128..256
    c1 = torch.rbln.counters()
    assert delta(c0, c1, "dispatch/device_casts") == 0
    want = torch.arange(64, dtype=torch.float32)
    want.view(torch.float16)[64:96] = torch.arange(32, 64, dtype=torch.float16)
    assert bit_equal(a.cpu(), want)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
