"""Pinned host memory, huge host buffers, offload and the host copies of
rbln tensors."""
# spec: F1, F2, F3, D2

import os
import sys

import pytest
import torch

import rbln_test_util


def test_pin_memory_with_rbln_as_accelerator():
    # spec: F1
    x = torch.empty(1000, pin_memory=True)
    assert x.is_pinned()
    assert x.data_ptr() % os.sysconf("SC_PAGE_SIZE") == 0
    assert not torch.empty(1000).is_pinned()
    y = torch.arange(10.0).pin_memory()
    assert y.is_pinned() and torch.equal(y, torch.arange(10.0))
    assert torch.equal(y.to("rbln", non_blocking=True).cpu(), torch.arange(10.0))
    assert torch.rbln.counters()["runtime/pinned_allocations"] >= 2


def test_huge_host_empty():
    # spec: F2
    t = torch.rbln.huge_host_empty(5 << 20)
    assert t.dtype == torch.uint8 and t.device.type == "cpu" and t.numel() == 5 << 20
    assert t.data_ptr() % (2 << 20) == 0
    assert t.is_pinned()
    t.fill_(7)
    d = t[:4096].to("rbln")
    assert torch.equal(d.cpu(), torch.full((4096,), 7, dtype=torch.uint8))
    with pytest.raises(ValueError, match="positive byte count"):
        torch.rbln.huge_host_empty(0)


def test_offload_backs_host_regions_with_files(tmp_path):
    # spec: F3
    with torch.rbln.offload(str(tmp_path)) as d:
        assert d == str(tmp_path)
        x = torch.arange(1024, dtype=torch.float32).to("rbln")
    y = torch.arange(16, dtype=torch.float32).to("rbln")  # Outside: in memory.
    path = torch.rbln._storage_info(x)["offload_path"]
    assert path.startswith(str(tmp_path)) and os.path.getsize(path) == 4096
    assert torch.rbln._storage_info(y)["offload_path"] == ""
    with open(path, "rb") as f:
        assert torch.equal(torch.frombuffer(bytearray(f.read()), dtype=torch.float32), torch.arange(1024.0))
    assert torch.equal(x.cpu(), torch.arange(1024.0))
    del x
    assert not os.path.exists(path)


def test_offload_default_dir_from_environment(tmp_path):
    r = rbln_test_util.run_python(
        "import torch, os\n"
        "with torch.rbln.offload() as d:\n"
        "    x = torch.ones(8).to('rbln')\n"
        "print(d == os.environ['RBLN_OFFLOAD_DIR'], len(os.listdir(d)))\n",
        {"RBLN_OFFLOAD_DIR": str(tmp_path / "off")},
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "True 1"



def test_release_host_copies_of_a_model_after_it_ran():
    # spec: D2 -- in-sync weights give up their host copy and stay right.
    torch.manual_seed(0)
    cpu = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
    x = torch.randn(4, 64)
    model = cpu.to("rbln")  # host-latest copies of the weights
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    info = torch.rbln._storage_info
    assert torch.rbln.release_host_copies(model) == 0  # not on the device yet
    assert all(info(p)["host_bytes"] == p.untyped_storage().nbytes() for p in model.parameters())
    # A compiled program reads the weights on the device (float32 eager ops
    # would run on the host, SPEC D4): they are uploaded, in sync.
    step = torch.compile(model, backend="rbln")
    want = step(x.to("rbln")).cpu()
    assert {info(p)["state"] for p in model.parameters()} == {"in-sync"}
    assert torch.rbln.release_host_copies(model) == weights
    assert all(info(p)["host_bytes"] == 0 and info(p)["state"] == "device-latest"
               for p in model.parameters())
    assert torch.rbln.release_host_copies(model.parameters()) == 0  # nothing left
    assert torch.equal(step(x.to("rbln")).cpu(), want)
    # A host read downloads the bytes into a new copy.
    downloads = torch.rbln.counters()["storage/downloads"]
    assert torch.equal(model[0].weight.cpu(), cpu[0].weight.detach())
    assert torch.rbln.counters()["storage/downloads"] == downloads + 1
    assert info(model[0].weight)["state"] == "in-sync"
    with pytest.raises(ValueError, match="expects an rbln tensor, got one on cpu"):
        torch.rbln.release_host_copies([torch.ones(2)])
    with pytest.raises(TypeError, match="got int"):
        torch.rbln.release_host_copies([3])


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
