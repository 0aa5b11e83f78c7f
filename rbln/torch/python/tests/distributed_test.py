"""The rbln-ccl process group: every collective on rbln tensors against the
same collective computed by gloo on CPU tensors, two ranks with one
simulated card each, and the ways to ask for the backend."""
# spec: A8, B1

import sys
import warnings

import pytest
import torch
import torch.distributed as dist

import rbln_dist_util

DTYPES = [torch.float16, torch.bfloat16, torch.float32]
REDUCE_OPS = ["SUM", "MAX", "MIN", "AVG"]


def _data(rank, dtype, shape=(4, 6)):
    """Rank-specific values, exact in every tested dtype after a few sums."""
    g = torch.Generator().manual_seed(1000 + rank)
    return (torch.randint(-64, 64, shape, generator=g).float() / 8).to(dtype)


def _cpu_reduce(t, op, cpu_group):
    """`op` over the ranks computed by gloo on the CPU; AVG as SUM / size."""
    ref = t.clone()
    if op == "AVG":
        dist.all_reduce(ref, op=dist.ReduceOp.SUM, group=cpu_group)
        ref.div_(dist.get_world_size())
    else:
        dist.all_reduce(ref, op=getattr(dist.ReduceOp, op), group=cpu_group)
    return ref


def _same(actual, expected, what):
    assert actual.device.type == "rbln", f"{what}: result left the device ({actual.device})"
    torch.testing.assert_close(actual.cpu(), expected, msg=lambda m: f"{what}: {m}")


def _collectives(rank, world, store_dir):
    assert dist.get_backend() == "rbln-ccl"
    cpu = dist.new_group(backend="gloo")
    dev = torch.device("rbln")
    before = torch_rbln_counters()
    for dtype in DTYPES:
        base = _data(rank, dtype)
        for op in REDUCE_OPS:
            x = base.to(dev)
            dist.all_reduce(x, op=getattr(dist.ReduceOp, op))
            _same(x, _cpu_reduce(base, op, cpu), f"all_reduce {op} {dtype}")

        # Async work: wait() and the future's value (what DDP chains on).
        x = base.to(dev)
        work = dist.all_reduce(x, op=dist.ReduceOp.SUM, async_op=True)
        work.wait()
        _same(x, _cpu_reduce(base, "SUM", cpu), f"async all_reduce {dtype}")
        x = base.to(dev)
        fut = dist.all_reduce(x, async_op=True).get_future()
        (value,) = fut.wait()
        _same(value, _cpu_reduce(base, "SUM", cpu), f"all_reduce future {dtype}")

        # A strided (transposed) device view, reduced in place.
        x = base.to(dev).t()
        assert not x.is_contiguous()
        dist.all_reduce(x)
        _same(x, _cpu_reduce(base.t(), "SUM", cpu), f"strided all_reduce {dtype}")

        for src in range(world):
            x = base.to(dev)
            ref = base.clone()
            dist.broadcast(x, src=src)
            dist.broadcast(ref, src=src, group=cpu)
            _same(x, ref, f"broadcast src={src} {dtype}")

        outs = [torch.empty_like(base, device=dev) for _ in range(world)]
        refs = [torch.empty_like(base) for _ in range(world)]
        dist.all_gather(outs, base.to(dev))
        dist.all_gather(refs, base, group=cpu)
        for i in range(world):
            _same(outs[i], refs[i], f"all_gather[{i}] {dtype}")

        out = torch.empty((world * 4, 6), dtype=dtype, device=dev)
        ref = torch.empty((world * 4, 6), dtype=dtype)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # renamed in 2.12
            dist.all_gather_into_tensor(out, base.to(dev))
        dist.all_gather_single(ref, base, group=cpu)
        _same(out, ref, f"all_gather_into_tensor {dtype}")

        big = _data(rank, dtype, shape=(world * 4, 6))
        for op in ("SUM", "AVG", "MAX"):
            out = torch.empty((4, 6), dtype=dtype, device=dev)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                dist.reduce_scatter_tensor(out, big.to(dev), op=getattr(dist.ReduceOp, op))
            full = _cpu_reduce(big, op, cpu)
            _same(out, full[rank * 4 : (rank + 1) * 4], f"reduce_scatter_tensor {op} {dtype}")

        for op in ("SUM", "AVG"):
            x = base.to(dev)
            dist.reduce(x, dst=1, op=getattr(dist.ReduceOp, op))
            ref = _cpu_reduce(base, op, cpu)  # On every rank: it is a collective.
            if rank == 1:
                _same(x, ref, f"reduce {op} {dtype}")
            else:
                _same(x, base, f"reduce leaves non-root tensors {dtype}")

        gathered = [torch.empty_like(base, device=dev) for _ in range(world)] if rank == 0 else None
        dist.gather(base.to(dev), gathered, dst=0)
        if rank == 0:
            for i in range(world):
                _same(gathered[i], _data(i, dtype), f"gather[{i}] {dtype}")

        chunks = [(_data(10 + i, dtype)).to(dev) for i in range(world)] if rank == 1 else None
        got = torch.empty_like(base, device=dev)
        dist.scatter(got, chunks, src=1)
        _same(got, _data(10 + rank, dtype), f"scatter {dtype}")

        # all_to_all_single with uneven splits: rank r sends r+1 rows to
        # every rank.
        rows_in = _data(rank, dtype, shape=(world * (rank + 1), 3))
        out_rows = sum(r + 1 for r in range(world))
        out = torch.empty((out_rows, 3), dtype=dtype, device=dev)
        ref = torch.empty((out_rows, 3), dtype=dtype)
        in_splits = [rank + 1] * world
        out_splits = [r + 1 for r in range(world)]
        dist.all_to_all_single(out, rows_in.to(dev), out_splits, in_splits)
        dist.all_to_all_single(ref, rows_in, out_splits, in_splits, group=cpu)
        _same(out, ref, f"all_to_all_single {dtype}")

        if rank == 0:
            dist.send(base.to(dev), dst=1)
        elif rank == 1:
            got = torch.zeros_like(base, device=dev)
            dist.recv(got, src=0)
            _same(got, _data(0, dtype), f"send/recv {dtype}")
        dist.barrier()

    # A subgroup made with new_group is an rbln-ccl group too.
    sub = dist.new_group(ranks=list(range(world)), backend="rbln-ccl")
    x = torch.full((5,), float(rank + 1), device=dev)
    dist.all_reduce(x, group=sub)
    assert x.cpu().tolist() == [3.0] * 5

    # The data path is counted for explain(): D2H and H2D staging copies.
    after = torch_rbln_counters()
    assert after["ccl/collectives"] > before.get("ccl/collectives", 0)
    assert after["ccl/d2h_copies"] > before.get("ccl/d2h_copies", 0)
    assert after["ccl/h2d_bytes"] > before.get("ccl/h2d_bytes", 0)


def torch_rbln_counters():
    import torch_rbln

    return torch_rbln._C._counters()




def _init_forms(rank, world, store_dir):
    dev = torch.device("rbln")
    dist.destroy_process_group()
    for i, backend in enumerate(["cpu:gloo,rbln:rbln-ccl", None]):
        # backend=None: torch picks the backend registered for the current
        # accelerator, which is rbln (SPEC B1).
        dist.init_process_group(
            backend=backend, init_method=f"file://{store_dir}/forms{i}", rank=rank, world_size=world
        )
        x = torch.full((3,), float(rank + 1), device=dev)
        dist.all_reduce(x)
        assert x.cpu().tolist() == [3.0, 3.0, 3.0], (backend, x.cpu())
        c = torch.full((3,), float(rank + 1))
        dist.all_reduce(c)
        assert c.tolist() == [3.0, 3.0, 3.0], (backend, c)
        objs = [None] * world
        dist.all_gather_object(objs, {"rank": rank})
        assert objs == [{"rank": 0}, {"rank": 1}], objs
        dist.barrier()
        dist.destroy_process_group()
    # run_ranks' own destroy needs a group.
    dist.init_process_group("rbln-ccl", init_method=f"file://{store_dir}/forms_end", rank=rank, world_size=world)
    # Both ranks finish connecting before either tears the group down (under
    # load a fast rank's teardown closed the mesh its peer was still joining).
    dist.barrier()


def _collectives_then_init_forms(rank, world, store_dir):
    _collectives(rank, world, store_dir)
    _init_forms(rank, world, store_dir)


def test_registered_for_rbln():
    # spec: A8
    assert "rbln-ccl" in dist.Backend.backend_list
    assert dist.Backend.default_device_backend_map["rbln"] == "rbln-ccl"
    assert dist.Backend.backend_capability["rbln-ccl"] == ["rbln"]


def test_collectives_match_gloo_on_cpu_and_backend_forms():
    # spec: A8, B1
    # One spawn for both: starting two ranks costs more than the checks.
    rbln_dist_util.run_ranks(_collectives_then_init_forms)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
