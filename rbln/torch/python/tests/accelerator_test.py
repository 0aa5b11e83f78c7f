"""torch.accelerator on rbln, and copies between logical devices in one
process (contiguous through the device-to-device DMA path, strided and
converting ones via the host), against the same data on CPU."""
# spec: B1, B4

import sys

import pytest
import torch

import rbln_test_util

TWO_CARDS = {"RBLN_SIM_PROFILE": "rebel100", "RBLN_SIM_NPUS": "2",
             "RBLN_SIM_MEMORY_PER_CHIPLET": "256MiB"}
# ATOM: four NPUs grouped two per logical device.
ATOM_GROUPS = {"RBLN_SIM_PROFILE": "atom", "RBLN_SIM_NPUS": "4", "RBLN_NPUS_PER_DEVICE": "2",
               "RBLN_SIM_MEMORY_PER_CHIPLET": "256MiB"}


def _run(code, env):
    r = rbln_test_util.run_python(code, env)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_current_accelerator_is_rbln():
    # spec: B1
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator() == torch.device("rbln")
    assert torch.accelerator.current_accelerator().type == "rbln"


ACCELERATOR_API = r"""
import torch
A = torch.accelerator
assert A.current_accelerator().type == "rbln"
assert A.device_count() == 2, A.device_count()
assert not torch.rbln.is_initialized()  # the queries above only plan (SPEC A6)
assert A.current_device_index() == 0
A.set_device_index(1)
assert A.current_device_index() == 1 and torch.rbln.current_device() == 1
assert torch.empty(1, device="rbln").device == torch.device("rbln:1")
with A.device_index(0):
    assert A.current_device_index() == 0
    assert torch.empty(1, device="rbln").device == torch.device("rbln:0")
assert A.current_device_index() == 1

s = A.current_stream()
assert s.device == torch.device("rbln:1"), s
assert A.current_stream(0).device == torch.device("rbln:0")
# A stream made for bare "rbln" belongs to the current device.
assert torch.Stream(device="rbln").device_index == 1
with torch.Stream(device="rbln:0"):
    x = torch.full((3,), 2.0, device="rbln:0") * 3
A.synchronize()
A.synchronize(0)
assert torch.rbln.is_initialized()
e = torch.Event(device="rbln")
e.record()
e.synchronize()
assert e.query()
assert x.cpu().tolist() == [6.0, 6.0, 6.0]
try:
    A.set_device_index(2)
except (IndexError, RuntimeError) as err:
    assert "out of range" in str(err), err
else:
    raise AssertionError("set_device_index(2) with two devices did not fail")
print("OK")
"""


def test_accelerator_api_on_two_devices():
    # spec: B1
    assert _run(ACCELERATOR_API, TWO_CARDS).strip() == "OK"


CROSS_DEVICE_COPIES = r"""
import torch, torch_rbln

def counters():
    return torch_rbln._C._counters()

def check(got, want, what):
    assert got.device == torch.device("rbln:1"), (what, got.device)
    assert got.shape == want.shape and got.dtype == want.dtype, (what, got.shape, got.dtype)
    torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0, msg=what)

for dtype in (torch.float16, torch.bfloat16, torch.float32):
    src_cpu = (torch.arange(48, dtype=torch.float32).reshape(6, 8) - 20).to(dtype)
    src = src_cpu.to("rbln:0")
    assert src.device == torch.device("rbln:0")

    # Contiguous: one device-to-device DMA, no host bounce.
    before = counters()
    check(src.to("rbln:1"), src_cpu, f"contiguous {dtype}")
    after = counters()
    assert after["runtime/dma_d2d_copies"] > before["runtime/dma_d2d_copies"], "no D2D DMA"
    assert after.get("runtime/host_bounce_copies", 0) == before.get("runtime/host_bounce_copies", 0)

    # Strided sources: transposed, stepped slices, an offset view, a
    # broadcast (stride 0) and a narrow column.
    views = {
        "t": lambda t: t.t(),
        "step": lambda t: t[1::2, ::3],
        "offset": lambda t: t[2:5, 3:],
        "expand": lambda t: t[0:1].expand(4, 8),
        "column": lambda t: t[:, 5],
    }
    for name, view in views.items():
        check(view(src).to("rbln:1"), view(src_cpu), f"{name} {dtype}")
        check(view(src).contiguous().to("rbln:1"), view(src_cpu).contiguous(),
              f"{name} contiguous {dtype}")

    # Strided destination on the other device: only the view's elements
    # change.
    dst_cpu = torch.full((6, 8), 7.0).to(dtype)
    dst = dst_cpu.to("rbln:1")
    dst[:, ::2].copy_(src[:, :4])
    dst_cpu[:, ::2].copy_(src_cpu[:, :4])
    check(dst, dst_cpu, f"strided destination {dtype}")

    # Converting while moving.
    check(src.to("rbln:1", dtype=torch.float32), src_cpu.float(), f"convert {dtype}")

    # And back: rbln:1 -> rbln:0 keeps the values.
    back = src.to("rbln:1").to("rbln:0")
    assert back.device == torch.device("rbln:0")
    torch.testing.assert_close(back.cpu(), src_cpu, rtol=0, atol=0)

# One op, two devices: a clear error (SPEC B4).
try:
    torch.ones(2, device="rbln:0") + torch.ones(2, device="rbln:1")
except RuntimeError as err:
    assert "rbln:0" in str(err) and "rbln:1" in str(err), err
else:
    raise AssertionError("an op over rbln:0 and rbln:1 did not fail")
print("OK")
"""


@pytest.mark.parametrize("env", [TWO_CARDS, ATOM_GROUPS], ids=["rebel100x2", "atom_groups_of_2"])
def test_copies_between_logical_devices(env):
    # spec: B4
    assert _run(CROSS_DEVICE_COPIES, env).strip() == "OK"


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
