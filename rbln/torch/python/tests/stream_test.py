"""Streams, events, synchronize and non_blocking copies."""
# spec: M1, M2, M3, M4, M5, L1, L2, L3, L4, L5, K3

import sys
import time

import pytest
import torch

import rbln_test_util

N = 1 << 24  # The M4 example: a 2^24-element buffer (64 MiB of float32).


def _counter(name):
    return torch.rbln.counters().get(name, 0)


def _bound(n=N):
    return torch.rbln.bind_device_memory(torch.empty(n, device="rbln"))


@pytest.fixture(scope="module")
def pinned_src():
    src = torch.empty(N, pin_memory=True)
    src.copy_(torch.arange(N, dtype=torch.float32))
    return src


def test_generic_and_rbln_streams_and_events():
    # spec: M1
    s = torch.Stream(device="rbln")
    assert s.device.type == "rbln" and s.device_index == torch.rbln.current_device()
    assert s.stream_id != 0 and s.query()
    e = torch.Event(device="rbln")
    e.record(s)
    e.synchronize()
    assert e.query()

    r = torch.rbln.Stream()
    assert isinstance(r, torch.Stream) and r.stream_id not in (0, s.stream_id)
    assert isinstance(torch.rbln.Event(), torch.Event)
    assert torch.rbln.current_stream() == torch.rbln.default_stream()
    assert torch.rbln.current_stream().stream_id == 0
    with torch.rbln.stream(r):
        assert torch.rbln.current_stream() == r
        assert torch.Stream(device="rbln") != r  # A new stream each time.
    assert torch.rbln.current_stream().stream_id == 0
    torch.rbln.set_stream(r)
    assert torch.rbln.current_stream() == r
    torch.rbln.set_stream(torch.rbln.default_stream())
    with r:  # torch.Stream's own context manager goes through the guard.
        assert torch.rbln.current_stream() == r
    assert torch.rbln.current_stream().stream_id == 0


def test_m4_non_blocking_upload_of_a_bound_buffer(pinned_src):
    # spec: M4, L1, L5
    dst = _bound()
    expected = pinned_src.clone()
    async_before = _counter("runtime/dma_h2d_async_copies")
    push_before = _counter("runtime/dma_h2d_copies")
    dst.copy_(pinned_src, non_blocking=True)
    done = torch.rbln.Event()
    done.record()
    assert done.query() is False  # The DMA engine still moves 64 MiB.
    done.synchronize()
    assert done.query() is True
    assert _counter("runtime/dma_h2d_async_copies") == async_before + 1
    assert _counter("runtime/dma_h2d_copies") == push_before  # Not a sync push.
    pinned_src.fill_(-1.0)  # The source may be reused now.
    assert torch.equal(dst.cpu(), expected)
    pinned_src.copy_(expected)


def test_l2_lazy_destination_lands_in_host_memory(pinned_src):
    # spec: L2
    dst = torch.empty(N, device="rbln")  # Lazy: no device memory yet.
    async_before = _counter("runtime/dma_h2d_async_copies")
    dma_before = _counter("runtime/dma_h2d_copies")
    dst.copy_(pinned_src, non_blocking=True)
    assert torch.rbln.current_stream().query()
    assert _counter("runtime/dma_h2d_async_copies") == async_before
    assert _counter("runtime/dma_h2d_copies") == dma_before  # Host shadow only.
    assert torch.equal(dst[:1000].cpu(), pinned_src[:1000])


def _pinned_half(n):
    # Compiled ops take half precision (float32 ops fall back to the CPU).
    return (torch.arange(n) % 100).to(torch.float16).pin_memory()


def test_l3_after_an_op_non_blocking_copies_are_synchronous_pushes():
    # spec: L3
    n = 4096
    src = _pinned_half(n)
    dst = torch.rbln.bind_device_memory(torch.empty(n, dtype=torch.float16, device="rbln"))
    async_before = _counter("runtime/dma_h2d_async_copies")
    with torch.rbln.explain() as async_report:
        dst.copy_(src, non_blocking=True)
        (dst + 1).cpu()  # An op input: the runtime re-lays dst out.
    assert _counter("runtime/dma_h2d_async_copies") == async_before + 1
    assert "host->device push (runtime): 0 pushes" in async_report.report()
    src2 = (src * 2).pin_memory()
    with torch.rbln.explain() as sync_report:
        dst.copy_(src2, non_blocking=True)  # Pinned, but synchronous now: a push.
        out = (dst + 1).cpu()
    assert _counter("runtime/dma_h2d_async_copies") == async_before + 1
    assert "host->device push (runtime): 1 pushes" in sync_report.report()
    assert torch.equal(out, src2 + 1)


def test_l4_non_qualifying_copy_completes_pending_transfers(pinned_src):
    # spec: L4
    big = _bound()
    s = torch.rbln.Stream()
    with torch.rbln.stream(s):
        big.copy_(pinned_src, non_blocking=True)
    assert not s.query()
    small = torch.empty(16, device="rbln")
    small.copy_(torch.ones(16), non_blocking=True)  # Not pinned: synchronous.
    assert s.query()  # The pending transfer was completed first.
    assert torch.equal(small.cpu(), torch.ones(16))
    assert torch.equal(big[-3:].cpu(), pinned_src[-3:])


def test_non_blocking_download_into_pinned_memory(pinned_src):
    # spec: L1
    # An op's output: the device holds the latest bytes.
    expected = _pinned_half(4096) + 1
    dev = _pinned_half(4096).to("rbln") + 1
    host = torch.empty(4096, dtype=torch.float16, pin_memory=True)
    before = _counter("runtime/dma_d2h_async_copies")
    host.copy_(dev, non_blocking=True)
    torch.rbln.synchronize()
    assert _counter("runtime/dma_d2h_async_copies") == before + 1
    assert torch.equal(host, expected)
    # A strided (non-contiguous) host view does not qualify: synchronous.
    host2 = torch.empty(4096 * 2, dtype=torch.float16, pin_memory=True)[::2]
    host2.copy_(dev, non_blocking=True)
    assert _counter("runtime/dma_d2h_async_copies") == before + 1
    assert torch.equal(host2, host)


def test_m2_per_stream_completion_and_device_side_wait(pinned_src):
    # spec: M2
    dst = _bound()
    s1, s2 = torch.rbln.Stream(), torch.rbln.Stream()
    with torch.rbln.stream(s1):
        dst.copy_(pinned_src, non_blocking=True)
    e = s1.record_event()
    assert isinstance(e, torch.rbln.Event)
    assert s1.record_event(torch.rbln.Event()) is not None
    t0 = time.perf_counter()
    s2.wait_event(e)  # A fence on s2: the host does not wait.
    waited = time.perf_counter() - t0
    assert not s1.query()
    assert not s2.query()  # Held by the fence.
    assert torch.rbln.default_stream().query()  # Completion is per stream.
    s2.synchronize()
    assert e.query()
    assert waited < 0.5
    assert torch.equal(dst[:5].cpu(), pinned_src[:5])


def test_m3_synchronize_waits_for_every_stream(pinned_src):
    # spec: M3
    a, b = _bound(), _bound()
    s1, s2 = torch.rbln.Stream(), torch.rbln.Stream()
    with torch.rbln.stream(s1):
        a.copy_(pinned_src, non_blocking=True)
    with torch.rbln.stream(s2):
        b.copy_(pinned_src, non_blocking=True)
    torch.rbln.synchronize()
    assert s1.query() and s2.query()


def test_m5_elapsed_time_agrees_with_host_timing(pinned_src):
    # spec: M5
    dst = _bound()
    start = torch.rbln.Event(enable_timing=True)
    end = torch.rbln.Event(enable_timing=True)
    torch.rbln.synchronize()
    t0 = time.perf_counter()
    start.record()
    dst.copy_(pinned_src, non_blocking=True)
    end.record()
    end.synchronize()
    host_ms = (time.perf_counter() - t0) * 1000
    ms = start.elapsed_time(end)
    # At least the transfer at the profile's host link rate (50 GB/s), and no
    # more than the host saw.
    assert N * 4 / 50e9 * 1000 * 0.9 <= ms <= host_ms + 1.0
    # The generic torch.Event measures the same way.
    a, b = torch.Event(device="rbln", enable_timing=True), torch.Event(device="rbln", enable_timing=True)
    a.record()
    dst.copy_(pinned_src, non_blocking=True)
    b.record()
    b.synchronize()
    assert a.elapsed_time(b) >= N * 4 / 50e9 * 1000 * 0.9
    with pytest.raises(ValueError, match="enable_timing"):
        torch.rbln.Event().elapsed_time(end)


def test_record_stream_defers_reuse_until_the_stream_passed(pinned_src):
    # spec: L5
    busy = _bound()
    x = _bound(1 << 20)
    s = torch.rbln.Stream()
    with torch.rbln.stream(s):
        busy.copy_(pinned_src, non_blocking=True)
    x.record_stream(s)
    allocated = torch.rbln.memory_allocated()
    del x
    still_busy = not s.query()
    after_del = torch.rbln.memory_allocated()
    torch.rbln.synchronize()
    after_sync = torch.rbln.memory_allocated()
    assert still_busy
    assert after_del == allocated  # s may still use the block.
    assert after_sync == allocated - (4 << 20)
    # Without record_stream the block is returned at once.
    y = _bound(1 << 20)
    allocated = torch.rbln.memory_allocated()
    del y
    assert torch.rbln.memory_allocated() == allocated - (4 << 20)


def test_k3_host_bounce_warns_once():
    # spec: K3
    r = rbln_test_util.run_python(
        """
import warnings, torch
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    a = torch.ones(8, dtype=torch.int32, device="rbln")
    b = torch.empty(8, dtype=torch.float16, device="rbln")
    b.copy_(a)
    b.copy_(a)
msgs = [str(x.message) for x in w if "went through host memory" in str(x.message)]
print(len(msgs), "Int" in msgs[0], "[8]" in msgs[0],
      int(torch.rbln.counters()["runtime/host_bounce_copies"]))
"""
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["1", "True", "True", "2"], r.stdout


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
