"""Every torch.cuda name in cuda_parity_names.txt: its torch.rbln twin exists
and behaves as on CUDA, or raises an error saying why it cannot on rbln."""
# spec: B1, E4, E5, E7, F1, M1, M3 (the twins that SPEC items already
# describe); the rest is torch.cuda parity (issue 18) with no SPEC ID.

import collections
import os
import sys
import tempfile
import warnings

import pytest
import torch

import rbln_test_util

HERE = os.path.dirname(os.path.abspath(__file__))
rbln = torch.rbln


def _load_names():
    rows = {}
    with open(os.path.join(HERE, "cuda_parity_names.txt")) as f:
        for line in f:
            if line.strip() and not line.startswith("#"):
                name, status, *why = line.split()
                rows[name] = (status, " ".join(why))
    return rows


NAMES = _load_names()


def _half_on_device(n=64):
    x = torch.randn(n, n, dtype=torch.float16).to("rbln")
    return x + x  # Device memory acquired by a compiled kernel.


def check_streams_and_events():
    s = rbln.Stream()
    e = rbln.Event(enable_timing=True)
    with rbln.StreamContext(s):
        assert rbln.current_stream() == s
        e.record()
    with rbln.stream(s):
        assert rbln.current_stream() == s
    e.synchronize()
    assert rbln.current_stream() == rbln.default_stream() and rbln.default_stream().stream_id == 0
    rbln.set_stream(s)
    assert rbln.current_stream() == s
    rbln.set_stream(rbln.default_stream())
    rbln.synchronize()


def check_amp():
    with rbln.amp.autocast(dtype=torch.bfloat16):
        assert (_half_on_device().float() @ torch.ones(64, 64).to("rbln")).dtype == torch.bfloat16
    assert isinstance(rbln.amp.GradScaler(), torch.amp.GradScaler)
    assert callable(rbln.amp.custom_fwd) and callable(rbln.amp.custom_bwd)
    assert rbln.amp.amp_definitely_not_available() is False


def check_caching_allocator():
    before = rbln.memory_allocated()
    ptr = rbln.caching_allocator_alloc(3 << 20)
    assert isinstance(ptr, int) and ptr != 0
    assert rbln.memory_allocated() >= before + (3 << 20)  # Acquired at once.
    rbln.caching_allocator_delete(ptr)
    assert rbln.memory_allocated() == before
    with pytest.raises(ValueError, match="not memory from caching_allocator_alloc"):
        rbln.caching_allocator_delete(12345)
    rbln.caching_allocator_enable(True)
    with pytest.raises(RuntimeError, match="cannot be disabled"):
        rbln.caching_allocator_enable(False)
    assert rbln.get_allocator_backend() == "native"


def check_devices():
    assert rbln.is_available() and rbln.device_count() >= 1
    rbln.init()
    assert rbln.is_initialized()
    assert rbln.current_device() == 0
    rbln.set_device(0)
    with rbln.device(0):
        assert rbln.current_device() == 0
    t = torch.ones(2, device="rbln")
    with rbln.device_of(t):
        assert rbln.current_device() == t.get_device()
    with rbln.device_of(torch.ones(2)):  # Not on rbln: a no-op.
        pass
    assert rbln.can_device_access_peer(0, 0)
    rbln.ipc_collect()
    assert rbln.is_current_stream_capturing() is False


def check_properties():
    p = rbln.get_device_properties(0)
    assert rbln.get_device_name(0) == p.name and p.name.startswith("RBLN-")
    assert rbln.get_device_capability(0) == (p.major, p.minor) == (2, 0)  # REBEL (rebel100).
    assert p.multi_processor_count == p.num_chiplet * p.npu_count == 4
    assert p.total_memory == rbln.mem_get_info(0)[1]
    assert p.is_integrated is False
    assert rbln.get_arch_list() == ["atom", "rebel100"]
    assert rbln.is_bf16_supported() is True and rbln.is_bf16_supported(including_emulation=False)
    assert rbln.is_tf32_supported() is False
    assert rbln.has_half is True


def check_rng():
    rbln.manual_seed(1)
    assert rbln.initial_seed() == 1
    rbln.manual_seed_all(2)
    assert [g.initial_seed() for g in rbln.default_generators] == [2] * rbln.device_count()
    state = rbln.get_rng_state()
    a = torch.rand(3, device="rbln").cpu()
    rbln.set_rng_state(state)
    assert torch.equal(torch.rand(3, device="rbln").cpu(), a)
    states = rbln.get_rng_state_all()
    b = torch.rand(3, device="rbln").cpu()
    rbln.set_rng_state_all(states)
    assert torch.equal(torch.rand(3, device="rbln").cpu(), b)
    rbln.seed()
    rbln.seed_all()
    assert rbln.random.get_rng_state is rbln.get_rng_state


def check_memory_stats():
    keep = _half_on_device()
    stats = rbln.memory_stats()
    assert stats["allocated_bytes.all.current"] == rbln.memory_allocated() > 0
    nested = rbln.memory_stats_as_nested_dict()
    assert nested["allocated_bytes"]["all"]["current"] == stats["allocated_bytes.all.current"]
    assert rbln.memory_reserved() >= rbln.memory_allocated()
    assert rbln.memory_cached() == rbln.memory_reserved()
    assert rbln.max_memory_cached() == rbln.max_memory_reserved() >= rbln.memory_reserved()
    assert rbln.max_memory_allocated() >= rbln.memory_allocated()
    extra = _half_on_device(512)
    del extra
    assert rbln.max_memory_allocated() > rbln.memory_allocated()
    with pytest.warns(FutureWarning, match="reset_peak_memory_stats"):
        rbln.reset_max_memory_allocated()
    assert rbln.max_memory_allocated() == rbln.memory_allocated()
    with pytest.warns(FutureWarning):
        rbln.reset_max_memory_cached()
    rbln.reset_peak_memory_stats()
    rbln.reset_accumulated_memory_stats()
    assert rbln.memory_stats()["allocated_bytes.all.allocated"] == 0
    free, total = rbln.mem_get_info()
    assert 0 < free < total
    assert "chiplet" in rbln.memory_summary()
    assert {seg["chiplet"] for seg in rbln.memory_snapshot()}
    rbln.empty_cache()
    assert rbln.memory_reserved() >= rbln.memory_allocated()
    assert rbln.memory._snapshot()["segments"]
    del keep


def check_memory_fraction():
    assert rbln.get_per_process_memory_fraction() == 1.0
    rbln.set_per_process_memory_fraction(0.5)
    try:
        assert rbln.get_per_process_memory_fraction() == 0.5
    finally:
        rbln.set_per_process_memory_fraction(1.0)
    with pytest.raises(TypeError, match="must be `float`"):
        rbln.set_per_process_memory_fraction(1)
    with pytest.raises(ValueError, match="Allowed range"):
        rbln.set_per_process_memory_fraction(1.5)


def check_host_memory_stats():
    before = rbln.host_memory_stats()
    assert {"allocations.current", "allocated_bytes.peak", "active_requests.current",
            "active_bytes.current", "num_host_alloc", "num_host_free",
            "host_alloc_time.total", "host_free_time.count"} <= set(before)
    pinned = torch.empty(1 << 20, pin_memory=True)
    during = rbln.host_memory_stats()
    assert during["allocations.current"] == before["allocations.current"] + 1
    assert during["active_bytes.current"] >= before["active_bytes.current"] + (4 << 20)
    del pinned
    after = rbln.host_memory_stats_as_nested_dict()
    assert after["allocations"]["current"] == before["allocations.current"]
    assert after["num_host_free"] == before["num_host_free"] + 1
    rbln.reset_peak_host_memory_stats()
    assert rbln.host_memory_stats()["allocated_bytes.peak"] == rbln.host_memory_stats()["allocated_bytes.current"]
    rbln.reset_accumulated_host_memory_stats()
    assert rbln.host_memory_stats()["num_host_alloc"] == 0


def check_sync_debug_mode():
    assert rbln.get_sync_debug_mode() == 0
    y = _half_on_device()
    rbln.set_sync_debug_mode("error")
    try:
        with pytest.raises(RuntimeError, match="host-device synchronization"):
            y.sum().item()
    finally:
        rbln.set_sync_debug_mode(0)


def check_smi_data():
    # Reads the rbln-smi files; other processes of this machine may be
    # listed too, so only this process's presence is checked here
    # (test_smi_data_isolated checks the numbers).
    _half_on_device()
    assert f"process {os.getpid():>10d} uses" in rbln.list_gpu_processes()
    assert rbln.device_memory_used() >= rbln.memory_reserved() > 0
    assert 0 <= rbln.utilization() <= 100


def check_modules():
    assert rbln.memory.memory_allocated is rbln.memory_allocated
    assert rbln.streams.Stream is rbln.Stream
    assert rbln.random.seed is rbln.seed


CHECKS = {
    check_streams_and_events: ["Event", "Stream", "StreamContext", "current_stream", "default_stream",
                               "set_stream", "stream", "synchronize"],
    check_amp: ["amp"],
    check_caching_allocator: ["caching_allocator_alloc", "caching_allocator_delete", "caching_allocator_enable",
                              "get_allocator_backend"],
    check_devices: ["is_available", "device_count", "init", "is_initialized", "current_device", "set_device",
                    "device", "device_of", "can_device_access_peer", "ipc_collect", "is_current_stream_capturing"],
    check_properties: ["get_device_properties", "get_device_name", "get_device_capability", "get_arch_list",
                       "is_bf16_supported", "is_tf32_supported", "has_half"],
    check_rng: ["manual_seed", "manual_seed_all", "initial_seed", "default_generators", "get_rng_state",
                "set_rng_state", "get_rng_state_all", "set_rng_state_all", "seed", "seed_all"],
    check_memory_stats: ["memory_stats", "memory_stats_as_nested_dict", "memory_allocated", "memory_reserved",
                         "memory_cached", "max_memory_cached", "max_memory_reserved", "max_memory_allocated",
                         "reset_max_memory_allocated", "reset_max_memory_cached", "reset_peak_memory_stats",
                         "reset_accumulated_memory_stats", "mem_get_info", "memory_summary", "memory_snapshot",
                         "empty_cache"],
    check_memory_fraction: ["set_per_process_memory_fraction", "get_per_process_memory_fraction"],
    check_host_memory_stats: ["host_memory_stats", "host_memory_stats_as_nested_dict",
                              "reset_peak_host_memory_stats", "reset_accumulated_host_memory_stats"],
    check_sync_debug_mode: ["set_sync_debug_mode", "get_sync_debug_mode"],
    check_smi_data: ["list_gpu_processes", "device_memory_used", "utilization"],
    check_modules: ["memory", "streams", "random"],
}
CHECKED = collections.Counter(name for names in CHECKS.values() for name in names)


def test_the_list_is_torch_cuda_all():
    assert set(NAMES) == set(torch.cuda.__all__), set(NAMES) ^ set(torch.cuda.__all__)
    assert {status for status, _ in NAMES.values()} == {"twin", "error", "absent"}
    for name, (status, why) in NAMES.items():
        assert status != "absent" or why, f"{name}: say why it is absent"


def test_every_twin_is_checked_once():
    twins = {n for n, (s, _) in NAMES.items() if s == "twin"}
    assert set(CHECKED) == twins, set(CHECKED) ^ twins
    assert max(CHECKED.values()) == 1


@pytest.mark.parametrize("check", list(CHECKS), ids=lambda c: c.__name__)
def test_twin_behaves(check):
    for name in CHECKS[check]:
        assert hasattr(rbln, name), name
        assert name in rbln.__all__, name
    check()


@pytest.mark.parametrize("name", sorted(n for n, (s, _) in NAMES.items() if s == "error"))
def test_error_says_why(name):
    with pytest.raises(RuntimeError, match=r"rbln: .*(not supported|not available|not measured|cannot)") as e:
        getattr(rbln, name)()
    assert len(str(e.value)) > 60, str(e.value)  # Names what to do instead.


@pytest.mark.parametrize("name", sorted(n for n, (s, _) in NAMES.items() if s == "absent"))
def test_absent_names_are_absent(name):
    assert not hasattr(rbln, name), name


FRESH_PROCESS = """
import os, pickle, threading, torch

# utilization / list_gpu_processes / device_memory_used from a private
# RBLN_SMI_DIR: only this process's numbers. A busy thread keeps the NPU
# computing; idle, utilization drops to 0.
a = torch.randn(512, 512, dtype=torch.float16).to("rbln")
a @ a  # Compiled before the sampling: busy time counts finished runs.
stop = threading.Event()
def work():
    while not stop.is_set():
        a @ a
t = threading.Thread(target=work)
t.start()
busy = max(torch.rbln.utilization() for _ in range(3))
stop.set(); t.join()
print("utilization", busy > 0, torch.rbln.utilization() == 0)
print("processes", torch.rbln.list_gpu_processes().splitlines()[1].split()[:2] == ["process", str(os.getpid())],
      torch.rbln.device_memory_used() == torch.rbln.memory_reserved())

# RNG: one generator and state per device (two ATOM NPUs).
torch.manual_seed(3)
states = torch.rbln.get_rng_state_all()
a0, a1 = torch.rand(4, device="rbln:0").cpu(), torch.rand(4, device="rbln:1").cpu()
torch.rand(4, device="rbln:1")
differ = not torch.equal(torch.rbln.get_rng_state(0), torch.rbln.get_rng_state(1))
torch.rbln.set_rng_state_all(states)
with torch.rbln.device(1):
    torch.rbln.manual_seed(9)
    seeds = torch.rbln.initial_seed()
print("rng", len(states) == 2, torch.equal(a0, a1), differ,
      torch.equal(torch.rand(4, device="rbln:0").cpu(), a0), seeds == 9, torch.rbln.initial_seed() == 3)

# Sync debug mode: a warm eager loop of device-resident data with the
# pre-dispatch checks off (TORCH_RBLN_DEPLOY=ON) reads nothing on the host.
x = torch.randn(64, 64, dtype=torch.float16).to("rbln")
y = (torch.rand(64, 64, dtype=torch.float16) * 0.5).to("rbln")
z = x * y + x
torch.rbln.set_sync_debug_mode("error")
for _ in range(10):
    z = z * y + x
torch.rbln.set_sync_debug_mode("default")
print("sync", bool(torch.isfinite(z.cpu()).all()))

# A memory fraction turns an allocation that fits the chiplet into an OOM
# saying so (E7); TORCH_RBLN_OOM_SNAPSHOT writes a snapshot with its trace.
torch.rbln.memory._record_memory_history("all", stacks="python")
torch.rbln.set_per_process_memory_fraction(0.25)
try:
    torch.rbln.bind_device_memory(torch.empty(10 << 20, device="rbln"))  # 40 MiB of a 64 MiB chiplet
except torch.OutOfMemoryError as e:
    message = str(e)
print("oom", "chiplet 0" in message, "set_per_process_memory_fraction" in message, "0.25" in message)
path = message.split("memory snapshot written to ")[1].split(" (")[0]
data = pickle.load(open(path, "rb"))
ooms = [e for t in data["device_traces"] for e in t if e["action"] == "oom"]
print("snapshot", path.startswith(os.environ["TORCH_RBLN_OOM_SNAPSHOT"]), len(ooms) == 1,
      ooms[0]["size"] == 40 << 20, "device_free" in ooms[0])
"""


def test_in_a_fresh_process():
    # What needs its own environment, in one child process (two 64 MiB ATOM
    # NPUs, private rbln-smi and OOM-snapshot directories, checks off).
    with tempfile.TemporaryDirectory() as smi_dir, tempfile.TemporaryDirectory() as snapshots:
        r = rbln_test_util.run_python(
            FRESH_PROCESS,
            {"RBLN_SIM_PROFILE": "atom", "RBLN_SIM_NPUS": "2", "RBLN_SIM_MEMORY_PER_CHIPLET": "64MiB",
             "RBLN_SMI_DIR": smi_dir, "TORCH_RBLN_OOM_SNAPSHOT": snapshots, "TORCH_RBLN_DEPLOY": "ON"},
        )
        assert r.returncode == 0, r.stderr
        assert len(os.listdir(snapshots)) == 1
    results = {line.split()[0]: line.split()[1:] for line in r.stdout.splitlines() if line}
    for name in ("utilization", "processes", "rng", "sync", "oom", "snapshot"):
        assert results.get(name) and all(v == "True" for v in results[name]), (name, r.stdout)


def test_count():
    counts = collections.Counter(s for s, _ in NAMES.values())
    print(f"torch.cuda names: {len(NAMES)}; twins {counts['twin']}, errors {counts['error']}, "
          f"absent {counts['absent']}")
    assert counts["twin"] + counts["error"] >= 80


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
