"""Device selection, the torch.rbln module, errors and device memory."""
# spec: A1, A6, A9, B1, B2, B3, D4, D5

import signal
import sys

import pytest
import torch

import rbln_test_util


def test_import_torch_alone_registers_rbln():
    # spec: B1 -- the torch.backends entry point loads torch_rbln.
    r = rbln_test_util.run_python(
        "import torch\n"
        "x = torch.ones(2, device='rbln')\n"
        "print(x.device, torch.rbln.device_count(), hasattr(x, 'is_rbln'))\n"
        "print(torch.accelerator.current_accelerator())\n"
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[0] == "rbln:0 1 True"
    assert r.stdout.split("\n")[1] == "rbln"


def test_device_count_and_availability():
    assert torch.rbln.is_available()
    assert torch.rbln.device_count() == 1
    assert torch.accelerator.device_count() == 1


def test_device_context_manager_changes_selection_in_block_only():
    # spec: B2
    r = rbln_test_util.run_python(
        "import torch\n"
        "assert torch.rbln.current_device() == 0\n"
        "with torch.rbln.device(1):\n"
        "    assert torch.rbln.current_device() == 1\n"
        "    x = torch.zeros(4, dtype=torch.float16, device='rbln')\n"
        "    y = torch.zeros(4, dtype=torch.float16)\n"
        "assert torch.rbln.current_device() == 0\n"
        "print(x.device, y.device)\n",
        {"RBLN_SIM_NPUS": "2"},
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "rbln:1 cpu"


def test_set_device_and_explicit_index():
    r = rbln_test_util.run_python(
        "import torch\n"
        "torch.rbln.set_device(1)\n"
        "print(torch.rbln.current_device(), torch.empty(1, device='rbln').device,"
        " torch.empty(1, device='rbln:0').device)\n",
        {"RBLN_SIM_NPUS": "2"},
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "1 rbln:1 rbln:0"


def test_query_apis_do_not_commit():
    # spec: A6 -- is_available/device_count/set_device plan only.
    r = rbln_test_util.run_python(
        "import torch\n"
        "torch.rbln.is_available(); torch.rbln.device_count(); torch.rbln.set_device(0)\n"
        "before = torch.rbln.is_initialized()\n"
        "torch.rbln.synchronize()\n"
        "print(before, torch.rbln.is_initialized())\n"
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False True"


def test_device_index_out_of_range_is_clear():
    with pytest.raises(IndexError, match=r"rbln: device index 3 is out of range.*rbln:0\.\.rbln:0"):
        torch.empty(2, device="rbln:3")
    with pytest.raises(IndexError, match="out of range"):
        torch.rbln.set_device(5)
    # Nothing already on the device is lost.
    x = torch.tensor([1.0, 2.0], device="rbln")
    assert x.cpu().tolist() == [1.0, 2.0]


def test_unknown_profile_is_clear_error():
    r = rbln_test_util.run_python(
        "import torch\ntorch.empty(1, device='rbln')\n", {"RBLN_SIM_PROFILE": "rebel200"}
    )
    assert r.returncode != 0
    assert "RBLN_SIM_PROFILE has invalid value 'rebel200'" in r.stderr
    assert "rebel100, atom" in r.stderr


def test_malformed_memory_size_is_clear_error():
    r = rbln_test_util.run_python(
        "import torch\nprint(torch.rbln.is_available())\ntorch.rbln.device_count()\n",
        {"RBLN_SIM_MEMORY_PER_CHIPLET": "16 gigs"},
    )
    assert r.returncode != 0
    assert r.stdout.strip() == "False"
    assert "RBLN_SIM_MEMORY_PER_CHIPLET has invalid value '16 gigs'" in r.stderr
    assert "MiB" in r.stderr


def test_profile_from_environment():
    # spec: A9
    r = rbln_test_util.run_python(
        "import torch\nprint(torch.rbln.get_device_profile())\n",
        {"RBLN_SIM_PROFILE": "atom", "RBLN_SIM_NPUS": "4", "RBLN_SIM_MEMORY_PER_CHIPLET": "64MiB"},
    )
    assert r.returncode == 0, r.stderr
    profile = eval(r.stdout)
    assert profile["name"] == "atom"
    assert profile["num_npus"] == 4
    assert profile["chiplets_per_npu"] == 1
    assert profile["memory_per_chiplet"] == 64 << 20


def test_out_of_memory_at_first_device_use_names_npu_and_chiplet():
    # spec: D3, E7 -- torch.empty reserves nothing; the first device op that
    # needs the memory raises, naming the chiplet; nothing else is lost.
    r = rbln_test_util.run_python(
        "import torch\n"
        "keep = torch.ones(64, dtype=torch.float16, device='rbln')\n"
        "keep = keep + keep\n"
        "big = torch.empty(3 << 19, dtype=torch.float16, device='rbln')\n"
        "print('created')\n"
        "try:\n"
        "    big + big\n"
        "except torch.OutOfMemoryError as e:\n"
        "    print('OOM', e)\n"
        "print(keep.cpu().tolist()[:2])\n",
        {"RBLN_SIM_MEMORY_PER_CHIPLET": "2MiB"},
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().split("\n")
    assert lines[0] == "created"
    assert lines[1].startswith("OOM rbln:0: out of device memory on NPU 0 chiplet")
    assert "tried to allocate 3145728 bytes" in lines[1]
    assert lines[2] == "[2.0, 2.0]"


def test_host_dereference_of_data_ptr_faults():
    # spec: D5 -- data_ptr() is a device address the CPU cannot read.
    r = rbln_test_util.run_python(
        "import ctypes, torch\n"
        "x = torch.arange(16, dtype=torch.float32).to('rbln')\n"
        "assert x.cpu()[3].item() == 3.0\n"
        "print('read', flush=True)\n"
        "ctypes.c_float.from_address(x.data_ptr()).value\n"
        "print('no fault')\n"
    )
    assert r.stdout.strip() == "read"
    assert r.returncode == -signal.SIGSEGV


def test_printing_and_host_round_trip():
    # spec: D4
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3).to("rbln")
    assert "device='rbln:0'" in repr(x)
    assert torch.equal(x.cpu(), torch.arange(6, dtype=torch.float32).reshape(2, 3))
    assert x[1, 2].item() == 5.0
    assert x.is_rbln


def test_host_only_work_never_touches_the_npu():
    # spec: D1, D2, D4 -- creating, printing, indexing and float32 math stay
    # on the host: no device memory, no DMA; tensors still say rbln:0.
    r = rbln_test_util.run_python(
        "import torch\n"
        "c = torch.rbln.counters\n"
        "x = torch.arange(12, dtype=torch.float32).reshape(3, 4).to('rbln')\n"
        "y = x * 2 + 1\n"
        "s = repr(y); v = y[1, 2].item(); z = torch.zeros(5, device='rbln')\n"
        "dma = sum(val for k, val in c().items() if k.startswith('runtime/dma_'))\n"
        "print(y.device, v, dma, torch.rbln._storage_info(y)['has_device_memory'],"
        " torch.rbln._storage_info(y)['state'])\n"
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "rbln:0 13.0 0 False host-latest"


def test_device_op_moves_data_once_each_way():
    # spec: D2, D8 -- inputs upload once, the output stays device-latest
    # until the host reads it, then it is in sync.
    r = rbln_test_util.run_python(
        "import torch\n"
        "c = torch.rbln.counters\n"
        "x = torch.ones(64, dtype=torch.float16).to('rbln')\n"
        "before = c()\n"
        "y = x + x\n"
        "mid = c()\n"
        "state = torch.rbln._storage_info(y)['state']\n"
        "y.cpu(); y.cpu()\n"
        "after = c()\n"
        "d = lambda a, b, k: a.get(k, 0) - b.get(k, 0)\n"
        "print(d(mid, before, 'storage/uploads'), state, d(after, mid, 'storage/downloads'),"
        " torch.rbln._storage_info(y)['state'])\n"
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "1 device-latest 1 in-sync"


def test_bind_device_memory():
    # spec: D6
    x = torch.empty(4, 64, dtype=torch.float16, device="rbln")
    assert not torch.rbln._storage_info(x)["has_device_memory"]
    assert torch.rbln.bind_device_memory(x) is x
    info = torch.rbln._storage_info(x)
    assert info["has_device_memory"] and info["bound"] and info["device_bytes"] >= 512
    with pytest.raises(ValueError, match="whole storage"):
        torch.rbln.bind_device_memory(x[1:])
    with pytest.raises(ValueError, match="contiguous"):
        torch.rbln.bind_device_memory(x.t())
    with pytest.raises(ValueError, match="rbln tensor"):
        torch.rbln.bind_device_memory(torch.empty(4))


def test_set_device_layout_like():
    # spec: D7
    ref = torch.ones(1024, dtype=torch.float16, device="rbln")
    ref = ref + ref  # ref's data is on the device now.
    target = torch.empty(1024, dtype=torch.float16, device="rbln")
    c = torch.rbln.counters
    before = c()
    assert torch.rbln.set_device_layout_like(target, ref) is target
    assert torch.rbln._storage_info(target)["chiplet"] == torch.rbln._storage_info(ref)["chiplet"]
    target.copy_(ref)
    after = c()
    assert after["storage/d2d_same_chiplet_copies"] == before.get("storage/d2d_same_chiplet_copies", 0) + 1
    assert after["runtime/dma_h2d_copies"] == before["runtime/dma_h2d_copies"]
    assert torch.equal(target.cpu(), torch.full((1024,), 2.0, dtype=torch.float16))
    with pytest.raises(ValueError, match="one dtype"):
        torch.rbln.set_device_layout_like(torch.empty(1024, device="rbln"), ref)
    with pytest.raises(ValueError, match="whole storage"):
        torch.rbln.set_device_layout_like(target[1:], ref)
    with pytest.raises(ValueError, match="data on the device"):
        torch.rbln.set_device_layout_like(target, torch.ones(1024, dtype=torch.float16, device="rbln"))


def test_eager_malloc_acquires_at_creation():
    # spec: D1
    r = rbln_test_util.run_python(
        "import torch\n"
        "x = torch.empty(1000, dtype=torch.float16, device='rbln')\n"
        "print(torch.rbln.memory_allocated(), torch.rbln._storage_info(x)['has_device_memory'])\n",
        {"TORCH_RBLN_EAGER_MALLOC": "1"},
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "4096 True"
    bad = rbln_test_util.run_python(
        "import torch\ntorch.empty(1, device='rbln')\n", {"TORCH_RBLN_EAGER_MALLOC": "sometimes"}
    )
    assert bad.returncode != 0 and "TORCH_RBLN_EAGER_MALLOC has invalid value 'sometimes'" in bad.stderr


def test_fork_after_use_raises_in_the_child():
    # spec: C1 -- fork before first use is fine; fork after use raises a
    # clear error at the child's first device call; the parent is unharmed.
    r = rbln_test_util.run_python(
        "import os, torch\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    x = torch.ones(4, dtype=torch.float16, device='rbln'); y = x + x\n"
        "    os._exit(0 if y.cpu()[0].item() == 2 else 3)\n"
        "print('early child', os.waitpid(pid, 0)[1])\n"
        "x = torch.ones(4, dtype=torch.float16, device='rbln'); y = x + x\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    bad = torch.rbln._is_in_bad_fork()\n"
        "    try:\n"
        "        z = x + x\n"
        "        os._exit(4)\n"
        "    except RuntimeError as e:\n"
        "        print('child:', bad, e, flush=True)\n"
        "        os._exit(0)\n"
        "print('late child', os.waitpid(pid, 0)[1])\n"
        "print('parent', y.cpu().tolist(), torch.rbln._is_in_bad_fork())\n"
    )
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "early child 0" in out
    assert "child: True rbln: this process" in out and "'spawn' start method" in out
    assert "late child 0" in out
    assert "parent [2.0, 2.0, 2.0, 2.0] False" in out


def test_views_share_storage_and_copy_back():
    base = torch.zeros(4, 4, device="rbln")
    view = base[1:3, 1:3]
    assert view.storage_offset() == 5
    view.copy_(torch.ones(2, 2))
    expected = torch.zeros(4, 4)
    expected[1:3, 1:3] = 1
    assert torch.equal(base.cpu(), expected)
    assert torch.equal(base.t().cpu(), expected.t())


def test_resize_keeps_data():
    x = torch.arange(4, dtype=torch.float32, device="rbln")
    x.resize_(10)
    assert x.cpu()[:4].tolist() == [0.0, 1.0, 2.0, 3.0]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
