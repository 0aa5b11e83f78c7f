"""ProcessGroupRbln: torch.distributed collectives on rbln tensors.

Data path (docs/distributed.md): the simulated cards have no interconnect, so
every collective runs on gloo over host memory:

    rbln tensor --D2H--> pinned host buffer --gloo--> pinned host buffer --H2D--> rbln tensor

The D2H staging happens when the collective is issued, on the caller's
thread, so it sees all work issued before it (rbln streams are synchronous).
Gloo runs the exchange on its own threads; the H2D copy-back runs when gloo
finishes, before the returned work (and its future, which DDP chains on)
completes. CPU tensors go to gloo directly. Every staging copy is counted in
the `ccl/*` counters that explain() reads.
"""

from __future__ import annotations

import datetime
import queue
import threading
from typing import Callable, List, Optional, Sequence

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import (
    AllgatherOptions,
    AllreduceCoalescedOptions,
    AllreduceOptions,
    AllToAllOptions,
    BarrierOptions,
    BroadcastOptions,
    GatherOptions,
    ReduceOptions,
    ReduceScatterOptions,
    ScatterOptions,
)

from ._agreement import CHECK_AGREEMENT, DTYPES, SIG_LEN, describe, describe_args, op_name, signature
from ._exit_drain import begin_job, end_job, track_tensors
from ._staging import Staging, bump_counter
from ._work import CclWork

BACKEND_NAME = "rbln-ccl"


def _wait_loop(pending: "queue.Queue") -> None:
    """Completes the futures of gloo works that have none (one thread per
    group; it holds the queue, not the group)."""
    while True:
        gloo_work, fut = pending.get()
        try:
            gloo_work.wait()
        except Exception as e:  # noqa: BLE001 -- handed to the future
            fut.set_exception(e)
        else:
            fut.set_result(None)
        del gloo_work, fut
        end_job()


def _run_jobs(jobs: "queue.Queue") -> None:
    while True:
        job = jobs.get()
        try:
            job()
        finally:
            del job
            end_job()


def _divide_by(hosts: Sequence[torch.Tensor], size: int) -> Callable[[], None]:
    """AVG's second half: the host sums divided by the world size."""

    def divide():
        for h in hosts:
            h.div_(size)

    return divide


def _check_same_shape(collective: str, what: str, tensors: Sequence[torch.Tensor], shape, dtype):
    for i, t in enumerate(tensors):
        if t.shape != shape or t.dtype != dtype:
            raise ValueError(
                f"rbln-ccl: {collective}: {what}[{i}] is {tuple(t.shape)} {t.dtype}, expected "
                f"{tuple(shape)} {dtype} like the input"
            )


class ProcessGroupRbln(dist.ProcessGroup):
    """A ProcessGroup for rbln tensors that exchanges bytes with gloo.

    A Python ProcessGroup (torch's PyProcessGroup trampoline), so C++ callers
    such as DDP's reducer reach these methods too.
    """

    def __init__(self, store: dist.Store, rank: int, size: int, timeout: datetime.timedelta):
        super().__init__(rank, size)
        self._timeout = timeout
        # A key prefix of our own: with "cpu:gloo,rbln:rbln-ccl" torch also
        # makes a gloo group over the same store.
        self._gloo = dist.ProcessGroupGloo(dist.PrefixStore(BACKEND_NAME, store), rank, size, timeout)
        # Completes futures for gloo works that have none (_future_of).
        self._pending: queue.Queue = queue.Queue()
        self._waiter: Optional[threading.Thread] = None
        self._waiter_lock = threading.Lock()
        # Runs receives in issue order (recv).
        self._p2p_jobs: queue.Queue = queue.Queue()
        self._p2p_thread: Optional[threading.Thread] = None

    # --- identity -----------------------------------------------------------
    def getBackendName(self) -> str:  # noqa: N802 (the C++ virtual's name)
        return BACKEND_NAME

    def _get_backend_name(self) -> str:
        return BACKEND_NAME

    def name(self) -> str:
        return BACKEND_NAME

    # --- plumbing -----------------------------------------------------------
    def _run(self, staging: Staging, gloo_work, result, post: Optional[Callable[[], None]] = None):
        """Work that completes after gloo's work and the copy-back.

        `post` runs on the host buffers before they are copied back (e.g.
        the division of AVG). Its future's value is `result` (a list of
        tensors), as DDP's comm hooks expect.
        """
        bump_counter("ccl/collectives")
        collective = staging.collective
        staging.keep_alive.append(gloo_work)

        errors: List[BaseException] = []
        # No reference to self in here: this runs on a gloo thread, and if
        # it dropped the last reference to the group, gloo's destructor
        # would join the thread it runs on (std::terminate).
        failure = self._failure

        def complete(fut: torch.futures.Future):
            try:
                fut.wait()
            except Exception as e:  # noqa: BLE001 -- re-raised with context
                errors.append(failure(collective, e))
                # The error's traceback keeps this frame: it must not keep
                # gloo's work or its future (and their tensors) alive.
                staging.keep_alive.clear()
                del fut
                raise errors[-1] from e
            if post is not None:
                post()
            staging.finish()
            staging.keep_alive.clear()
            return result

        return CclWork(self._future_of(gloo_work).then(complete), errors)

    @property
    def _failure(self) -> Callable[[str, Exception], RuntimeError]:
        """A function making the error of a failed collective; it holds no
        reference to the group."""
        where = f"rank {self.rank()} of {self.size()}"
        timeout = self._timeout

        def failure(collective: str, error: Exception) -> RuntimeError:
            return RuntimeError(
                f"rbln-ccl: {collective} failed on {where} (a rank died, timed out after "
                f"{timeout}, or called another collective): {error}"
            )

        return failure

    def _future_of(self, gloo_work) -> torch.futures.Future:
        """Gloo's future for `gloo_work`; for the works gloo gives none
        (e.g. _reduce_scatter_base), one completed by a waiter thread."""
        try:
            return gloo_work.get_future()
        except RuntimeError:
            pass
        fut = torch.futures.Future()
        with self._waiter_lock:
            if self._waiter is None:
                self._waiter = threading.Thread(
                    target=_wait_loop, args=(self._pending,), name="rbln-ccl-waiter", daemon=True
                )
                self._waiter.start()
        begin_job()
        self._pending.put((gloo_work, fut))
        return fut

    def _agree(self, collective: str, tensor: Optional[torch.Tensor] = None, op=None, root: int = -1,
               count: int = 1) -> None:
        """Checks that every rank calls `collective` with the same shape,
        dtype, op and root, before any payload moves: gloo aborts the whole
        process on a size mismatch. One fixed-size gloo all_gather, so the
        check itself cannot mismatch. TORCH_RBLN_CCL_CHECK=0 skips it."""
        if not CHECK_AGREEMENT:
            return
        sig = signature(collective, tensor, op, root, count)
        rows = torch.empty((self.size() * SIG_LEN,), dtype=torch.int64)
        track_tensors([rows, sig])
        try:
            self._gloo._allgather_base(rows, sig, AllgatherOptions()).wait()
        except RuntimeError as e:
            raise self._failure(collective, e) from e
        rows = rows.view(self.size(), SIG_LEN)
        bump_counter("ccl/agreement_checks")
        if not bool((rows == sig).all()):
            calls = "; ".join(f"rank {r}: {describe(rows[r])}" for r in range(self.size()))
            raise ValueError(
                f"rbln-ccl: ranks disagree on {collective}: {calls}. Every rank must call the "
                f"same collectives in the same order with the same shape, dtype and op "
                f"(TORCH_RBLN_CCL_CHECK=0 skips this check; gloo then aborts on a size mismatch)."
            )

    @staticmethod
    def _reduce_op(collective: str, op, tensors: Sequence[torch.Tensor]):
        """Gloo's op for `op` and whether to divide by the world size after."""
        if op == dist.ReduceOp.AVG:
            for t in tensors:
                if not (t.is_floating_point() or t.is_complex()):
                    raise ValueError(
                        f"rbln-ccl: {collective} with ReduceOp.AVG needs floating-point tensors, "
                        f"got {t.dtype}; use SUM and divide yourself"
                    )
            return dist.ReduceOp.SUM, True
        if op_name(op) not in ("SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"):
            raise ValueError(f"rbln-ccl: {collective} does not support ReduceOp.{op_name(op)}")
        return op, False

    # --- collectives --------------------------------------------------------
    def allreduce(self, tensors, opts=None):
        if isinstance(opts, dist.ReduceOp) or opts is None:
            op = opts if opts is not None else dist.ReduceOp.SUM
            opts = AllreduceOptions()
            opts.reduceOp = op
        return self._staged_reduce("all_reduce", tensors, opts, AllreduceOptions(),
                                   self._gloo.allreduce)

    def allreduce_coalesced(self, tensors, opts=None):
        return self._staged_reduce("all_reduce_coalesced", tensors,
                                   opts or AllreduceCoalescedOptions(),
                                   AllreduceCoalescedOptions(), self._gloo.allreduce_coalesced)

    def _staged_reduce(self, name, tensors, opts, gloo_opts, gloo_call):
        """Reduces `tensors` in place through host staging and gloo.

        AVG is gloo SUM followed by a division on the host copies, before
        the results go back to the device.
        """
        staging = Staging(name, tensors)
        gloo_op, average = self._reduce_op(name, opts.reduceOp, tensors)
        self._agree(name, tensors[0] if tensors else None, opts.reduceOp, count=len(tensors))
        hosts = [staging.host_inout(t) for t in tensors]
        gloo_opts.reduceOp = gloo_op
        gloo_opts.timeout = opts.timeout
        work = gloo_call(hosts, gloo_opts)
        divide = _divide_by(hosts, self.size())
        return self._run(staging, work, list(tensors), divide if average else None)

    def broadcast(self, tensors, opts=None):
        opts = opts or BroadcastOptions()
        staging = Staging("broadcast", tensors)
        self._agree("broadcast", tensors[0] if tensors else None, root=opts.rootRank,
                    count=len(tensors))
        # The root sends its values; the others only receive, so they skip
        # the D2H of bytes about to be overwritten.
        if self.rank() == opts.rootRank:
            hosts = [staging.host_input(t) for t in tensors]
        else:
            hosts = [staging.host_output(t) for t in tensors]
        gloo_opts = BroadcastOptions()
        gloo_opts.rootRank = opts.rootRank
        gloo_opts.rootTensor = opts.rootTensor
        gloo_opts.timeout = opts.timeout
        return self._run(staging, self._gloo.broadcast(hosts, gloo_opts), list(tensors))

    def allgather(self, output_lists, inputs, opts=None):
        opts = opts or AllgatherOptions()
        outputs = [t for lst in output_lists for t in lst]
        staging = Staging("all_gather", list(inputs) + outputs)
        for inp, lst in zip(inputs, output_lists):
            if len(lst) != self.size():
                raise ValueError(
                    f"rbln-ccl: all_gather needs one output tensor per rank ({self.size()}), "
                    f"got {len(lst)}"
                )
            _check_same_shape("all_gather", "tensor_list", lst, inp.shape, inp.dtype)
        self._agree("all_gather", inputs[0] if inputs else None, count=len(inputs))
        host_in = [staging.host_input(t) for t in inputs]
        host_out = [[staging.host_output(t) for t in lst] for lst in output_lists]
        work = self._gloo.allgather(host_out, host_in, self._gloo_opts(AllgatherOptions(), opts))
        return self._run(staging, work, outputs)

    def all_gather_single(self, output, input, opts=None):
        opts = opts or AllgatherOptions()
        staging = Staging("all_gather_into_tensor", [output, input])
        if output.numel() != input.numel() * self.size() or output.dtype != input.dtype:
            raise ValueError(
                f"rbln-ccl: all_gather_into_tensor needs an output of world_size ({self.size()}) "
                f"x the input's elements and dtype: output {tuple(output.shape)} {output.dtype}, "
                f"input {tuple(input.shape)} {input.dtype}"
            )
        self._agree("all_gather_into_tensor", input)
        host_in = staging.host_input(input)
        host_out = staging.host_output(output)
        work = self._gloo._allgather_base(host_out, host_in, self._gloo_opts(AllgatherOptions(), opts))
        return self._run(staging, work, [output])

    _allgather_base = all_gather_single  # the name before torch 2.12

    def reduce_scatter(self, outputs, input_lists, opts=None):
        opts = opts or ReduceScatterOptions()
        inputs = [t for lst in input_lists for t in lst]
        staging = Staging("reduce_scatter", list(outputs) + inputs)
        gloo_op, average = self._reduce_op("reduce_scatter", opts.reduceOp, outputs)
        self._agree("reduce_scatter", outputs[0] if outputs else None, opts.reduceOp,
                    count=len(inputs))
        host_out = [staging.host_output(t) for t in outputs]
        host_in = [[staging.host_input(t) for t in lst] for lst in input_lists]
        gloo_opts = ReduceScatterOptions()
        gloo_opts.reduceOp = gloo_op
        gloo_opts.timeout = opts.timeout
        work = self._gloo.reduce_scatter(host_out, host_in, gloo_opts)
        divide = _divide_by(host_out, self.size())
        return self._run(staging, work, list(outputs), divide if average else None)

    def reduce_scatter_single(self, output, input, opts=None):
        opts = opts or ReduceScatterOptions()
        staging = Staging("reduce_scatter_tensor", [output, input])
        if input.numel() != output.numel() * self.size() or output.dtype != input.dtype:
            raise ValueError(
                f"rbln-ccl: reduce_scatter_tensor needs an input of world_size ({self.size()}) "
                f"x the output's elements and dtype: input {tuple(input.shape)} {input.dtype}, "
                f"output {tuple(output.shape)} {output.dtype}"
            )
        gloo_op, average = self._reduce_op("reduce_scatter_tensor", opts.reduceOp, [output])
        self._agree("reduce_scatter_tensor", input, opts.reduceOp)
        host_out = staging.host_output(output)
        host_in = staging.host_input(input)
        gloo_opts = ReduceScatterOptions()
        gloo_opts.reduceOp = gloo_op
        gloo_opts.timeout = opts.timeout
        work = self._gloo._reduce_scatter_base(host_out, host_in, gloo_opts)
        return self._run(
            staging, work, [output], _divide_by([host_out], self.size()) if average else None
        )

    _reduce_scatter_base = reduce_scatter_single  # the name before torch 2.12

    def reduce(self, tensors, opts=None):
        opts = opts or ReduceOptions()
        staging = Staging("reduce", tensors)
        gloo_op, average = self._reduce_op("reduce", opts.reduceOp, tensors)
        self._agree("reduce", tensors[0] if tensors else None, opts.reduceOp, root=opts.rootRank,
                    count=len(tensors))
        # Only the root's tensor changes.
        root = self.rank() == opts.rootRank
        hosts = [staging.host_inout(t) if root else staging.host_input(t) for t in tensors]
        gloo_opts = ReduceOptions()
        gloo_opts.reduceOp = gloo_op
        gloo_opts.rootRank = opts.rootRank
        gloo_opts.rootTensor = opts.rootTensor
        gloo_opts.timeout = opts.timeout
        work = self._gloo.reduce(hosts, gloo_opts)
        divide = _divide_by(hosts, self.size())
        return self._run(staging, work, list(tensors), divide if average and root else None)

    def gather(self, output_lists, inputs, opts=None):
        opts = opts or GatherOptions()
        outputs = [t for lst in output_lists for t in lst]
        staging = Staging("gather", list(inputs) + outputs)
        self._agree("gather", inputs[0] if inputs else None, root=opts.rootRank, count=len(inputs))
        host_in = [staging.host_input(t) for t in inputs]
        host_out = [[staging.host_output(t) for t in lst] for lst in output_lists]
        gloo_opts = GatherOptions()
        gloo_opts.rootRank = opts.rootRank
        gloo_opts.timeout = opts.timeout
        return self._run(staging, self._gloo.gather(host_out, host_in, gloo_opts), outputs)

    def scatter(self, outputs, input_lists, opts=None):
        opts = opts or ScatterOptions()
        inputs = [t for lst in input_lists for t in lst]
        staging = Staging("scatter", list(outputs) + inputs)
        self._agree("scatter", outputs[0] if outputs else None, root=opts.rootRank,
                    count=len(outputs))
        host_out = [staging.host_output(t) for t in outputs]
        host_in = [[staging.host_input(t) for t in lst] for lst in input_lists]
        gloo_opts = ScatterOptions()
        gloo_opts.rootRank = opts.rootRank
        gloo_opts.timeout = opts.timeout
        return self._run(staging, self._gloo.scatter(host_out, host_in, gloo_opts), list(outputs))

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        opts = opts or AllToAllOptions()
        staging = Staging("all_to_all_single", [output, input])
        # Split sizes differ between ranks by design; the check covers the
        # dtype and the trailing dimensions.
        self._agree("all_to_all_single",
                    torch.empty((0,) + tuple(input.shape[1:]), dtype=input.dtype, device="meta"))
        host_in = staging.host_input(input)
        host_out = staging.host_output(output)
        gloo_opts = AllToAllOptions()
        gloo_opts.timeout = opts.timeout
        work = self._gloo.alltoall_base(
            host_out, host_in, list(output_split_sizes), list(input_split_sizes), gloo_opts
        )
        return self._run(staging, work, [output])

    alltoall_base = all_to_all_single  # the name before torch 2.12

    def barrier(self, opts=None):
        # Gloo's barrier needs no tensors; the device in `opts` (set by
        # dist.barrier to the current accelerator) does not matter to it.
        gloo_opts = BarrierOptions()
        if opts is not None:
            gloo_opts.timeout = opts.timeout
        self._agree("barrier")
        bump_counter("ccl/collectives")
        return self._gloo.barrier(gloo_opts)

    # Point-to-point: with the agreement check on, each send is preceded by a
    # header (the tensor's signature) that the receiver checks before it
    # takes the payload; on a mismatch it drains the payload into a scratch
    # buffer (so the pair stays usable) and raises. The receiver waits for
    # the header on a thread of its own, so irecv() does not block.
    def send(self, tensors, dst, tag):
        staging = Staging("send", tensors)
        if len(tensors) != 1:
            raise ValueError(f"rbln-ccl: send takes one tensor, got {len(tensors)}")
        hosts = [staging.host_input(t) for t in tensors]
        if CHECK_AGREEMENT:
            # Gloo drops a send whose work object dies: the staging keeps it.
            header = [signature("send", tensors[0], None, -1, 1)]
            track_tensors(header)
            staging.keep_alive.append(self._gloo.send(header, dst, tag))
        return self._run(staging, self._gloo.send(hosts, dst, tag), list(tensors))

    def recv(self, tensors, src, tag):
        staging = Staging("recv", tensors)
        if len(tensors) != 1:
            raise ValueError(f"rbln-ccl: recv takes one tensor, got {len(tensors)}")
        hosts = [staging.host_output(t) for t in tensors]
        if not CHECK_AGREEMENT:
            return self._run(staging, self._gloo.recv(hosts, src, tag), list(tensors))
        bump_counter("ccl/collectives")
        errors: List[BaseException] = []
        fut = torch.futures.Future()
        expected = signature("send", tensors[0], None, -1, 1)
        gloo, rank, failure = self._gloo, self.rank(), self._failure

        def receive():
            header = torch.empty(SIG_LEN, dtype=torch.int64)
            track_tensors([header])
            gloo.recv([header], src, tag).wait()
            if not bool((header == expected).all()):
                sent = header.tolist()
                scratch = torch.empty(max(sent[5], 0), dtype=DTYPES[sent[2]])
                track_tensors([scratch])
                gloo.recv([scratch], src, tag).wait()
                raise ValueError(
                    f"rbln-ccl: recv on rank {rank} expected {describe_args(expected)} "
                    f"from rank {src} but rank {src} sent {describe_args(header)}; pass a "
                    f"tensor of the sent shape and dtype"
                )
            gloo.recv(hosts, src, tag).wait()
            staging.finish()

        def run():
            try:
                receive()
            except Exception as e:  # noqa: BLE001 -- handed to the work
                errors.append(e if isinstance(e, ValueError) else failure("recv", e))
                fut.set_exception(errors[-1])
            else:
                fut.set_result(list(tensors))

        begin_job()
        self._p2p_queue().put(run)
        return CclWork(fut, errors)

    def _p2p_queue(self) -> "queue.Queue":
        with self._waiter_lock:
            if self._p2p_thread is None:
                self._p2p_thread = threading.Thread(
                    target=_run_jobs, args=(self._p2p_jobs,), name="rbln-ccl-recv", daemon=True
                )
                self._p2p_thread.start()
        return self._p2p_jobs

    def recv_anysource(self, tensors, tag):
        raise RuntimeError("rbln-ccl: recv without a source rank is not supported; pass src=")

    @staticmethod
    def _gloo_opts(gloo_opts, opts):
        gloo_opts.timeout = opts.timeout
        return gloo_opts

    # --- lifetime -----------------------------------------------------------
    def abort(self):
        self._gloo.abort()

    def shutdown(self):
        self._gloo.shutdown()
