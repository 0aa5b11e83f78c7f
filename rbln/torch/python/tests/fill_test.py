"""fill_/zero_ on rbln: on the device for device-resident storages, a host
fill for lazy ones; compared with PyTorch CPU, incl. strided views."""
# spec: G1, D1, D4

import sys

import pytest
import torch

from rbln_test_util import delta

# Counters of every transfer between host and device memory.
_TRANSFERS = (
    "runtime/dma_h2d_copies",
    "runtime/dma_d2h_copies",
    "storage/uploads",
    "storage/downloads",
    "storage/host_pushes",
)


def device_latest(cpu):
    """`cpu` on rbln, written by a device copy (so its storage is
    device-latest)."""
    x = torch.empty(cpu.shape, dtype=cpu.dtype, device="rbln")
    x.copy_(cpu.to("rbln"))
    assert torch.rbln._storage_info(x)["state"] == "device-latest"
    return x


VIEWS = [
    ("whole", lambda t: t),
    ("every_other_column", lambda t: t[:, ::2]),
    ("transposed", lambda t: t.t()),
    ("block", lambda t: t[8:24, 64:192]),
    ("column", lambda t: t[:, 3]),
    ("row", lambda t: t[5]),
    ("stepped_both", lambda t: t[1::3, 2::5]),
    ("scalar", lambda t: t[2, 7]),
]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name,view", VIEWS, ids=[v[0] for v in VIEWS])
@pytest.mark.parametrize("value", [3, -0.5, 1 / 3, float("inf")])
def test_fill_of_device_latest_storage_runs_on_the_device(dtype, name, view, value):
    # spec: G1 -- a device-latest storage is filled in place on the device:
    # the view's elements take the value, the rest of the storage keeps its
    # bytes, and nothing moves between host and device.
    base = torch.randn(32, 256).to(dtype)
    x = device_latest(base)
    before = torch.rbln.counters()
    out = view(x).fill_(value)
    after = torch.rbln.counters()
    assert out.data_ptr() == view(x).data_ptr()
    assert delta(before, after, "dispatch/device_fills") == 1
    assert delta(before, after, "dispatch/host_fills") == 0
    for key in _TRANSFERS:
        assert delta(before, after, key) == 0, key
    assert torch.rbln._storage_info(x)["state"] == "device-latest"
    want = base.clone()
    view(want).fill_(value)
    torch.testing.assert_close(x.cpu(), want, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_zero_and_in_sync_storages(dtype):
    # spec: G1 -- zero_ is the same device fill; an in-sync storage (device
    # bytes read back once) fills on the device too, without a transfer.
    base = torch.randn(16, 128).to(dtype)
    x = device_latest(base)
    x.cpu()
    assert torch.rbln._storage_info(x)["state"] == "in-sync"
    before = torch.rbln.counters()
    x[:, 64:].zero_()
    after = torch.rbln.counters()
    assert delta(before, after, "dispatch/device_fills") == 1
    for key in _TRANSFERS:
        assert delta(before, after, key) == 0, key
    want = base.clone()
    want[:, 64:] = 0
    torch.testing.assert_close(x.cpu(), want, rtol=0, atol=0)


def test_lazy_storage_keeps_the_host_fill():
    # spec: D1, D4 -- torch.ones/zeros/full and fill_ of a storage with no
    # device memory are host work: no device memory, no upload just to fill.
    before = torch.rbln.counters()
    x = torch.zeros(16, 128, dtype=torch.float16, device="rbln")
    x[:, ::2].fill_(3)
    after = torch.rbln.counters()
    info = torch.rbln._storage_info(x)
    assert not info["has_device_memory"] and info["state"] == "host-latest"
    assert delta(before, after, "dispatch/device_fills") == 0
    assert delta(before, after, "dispatch/host_fills") == 2
    for key in _TRANSFERS:
        assert delta(before, after, key) == 0, key
    want = torch.zeros(16, 128, dtype=torch.float16)
    want[:, ::2] = 3
    torch.testing.assert_close(x.cpu(), want, rtol=0, atol=0)


def test_other_dtypes_and_overlapping_views_fill_on_the_host():
    # spec: G1 -- float32 has no compiled kernels; an expanded view (one
    # element seen many times) is no box fill_strided can describe. Both are
    # exact through the host.
    x = device_latest(torch.randn(8, 64))
    before = torch.rbln.counters()
    x[::2].fill_(2)
    after = torch.rbln.counters()
    assert delta(before, after, "dispatch/host_fills") == 1
    want = x.cpu()
    want[::2] = 2
    torch.testing.assert_close(x.cpu(), want)
    base = torch.randn(1, 64).half()
    y = device_latest(base)
    before = torch.rbln.counters()
    y.expand(4, 64).fill_(5)
    after = torch.rbln.counters()
    assert delta(before, after, "dispatch/host_fills") == 1
    torch.testing.assert_close(y.cpu(), torch.full((1, 64), 5.0, dtype=torch.float16))


def test_successive_device_fills_apply_in_order():
    # spec: G1 -- overlapping device fills of one storage land in call order.
    x = device_latest(torch.randn(16, 64).half())
    x[:8].fill_(1)
    x[4:12].fill_(2)
    got = x.cpu()
    torch.testing.assert_close(got[:4], torch.ones(4, 64, dtype=torch.float16))
    torch.testing.assert_close(got[4:12], torch.full((8, 64), 2.0, dtype=torch.float16))


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
