"""Process exit waits until gloo's worker threads let go of Python objects.

A gloo worker drops a finished work (the tensors in it, the callbacks chained
on its future) after the thread waiting on it has been woken. Dropping a
tensor that has a Python object, or a Python callback, takes the GIL. Once
the interpreter is finalizing, CPython ends a thread that asks for the GIL
with pthread_exit, and that unwinding through torch's noexcept decref aborts
the whole process ("terminate called without an active exception") after
the user's program has finished. So an atexit hook (atexit runs before
finalization starts) releases the GIL until every tensor handed to gloo is
back to the references it had before. A gloo worker drops a work's tensors
after the callbacks chained on its future have run and been dropped, so
that covers the callbacks too. Our own threads (the recv thread, the
waiter) complete futures, which also releases the GIL: exit waits until
they are back in Python too.
"""

from __future__ import annotations

import atexit
import itertools
import sys
import threading
import time
import weakref
from typing import Callable, Dict, Iterable, Tuple

import torch

# Exit waits at most this long for collectives that never finish (a peer
# died, a collective issued and never waited on); it then says so.
_EXIT_WAIT_S = 5.0

# Reentrant: a weakref callback may fire while _held() holds it.
_lock = threading.RLock()
_ids = itertools.count()
# id -> (weak tensor, C++ use count before gloo had it)
_tensors: Dict[int, Tuple[weakref.ref, int]] = {}
# Jobs our threads have not finished.
_jobs = 0
_registered = False


def _register_once() -> None:
    global _registered
    if not _registered:
        _registered = True
        atexit.register(wait_for_gloo_threads)


def _forget(table: Dict, key: int) -> Callable[[weakref.ref], None]:
    def forget(_ref: weakref.ref) -> None:
        with _lock:
            table.pop(key, None)

    return forget


def track_tensors(tensors: Iterable[torch.Tensor]) -> None:
    """Call before handing `tensors` to gloo."""
    with _lock:
        _register_once()
        for t in tensors:
            key = next(_ids)
            _tensors[key] = (weakref.ref(t, _forget(_tensors, key)), t._use_count())
            # A long-lived CPU tensor would add an entry per collective.
            if key % 1024 == 1023:
                _held()


def begin_job() -> None:
    """Call before handing a job to a thread of ours that completes a future
    (the recv thread, the waiter); it calls end_job() when back in Python."""
    global _jobs
    with _lock:
        _register_once()
        _jobs += 1


def end_job() -> None:
    global _jobs
    with _lock:
        _jobs -= 1


def _held() -> int:
    """How many tracked tensors gloo still holds (forgetting released ones),
    plus the unfinished jobs."""
    with _lock:
        for key, (ref, baseline) in list(_tensors.items()):
            t = ref()
            # use_count counts C++ references only: the Python object's own
            # plus gloo's; back at its baseline, gloo has let go.
            if t is None or t._use_count() <= baseline:
                del _tensors[key]
        return len(_tensors) + _jobs


def wait_for_gloo_threads(timeout_s: float = _EXIT_WAIT_S) -> bool:
    """Releases the GIL until gloo holds none of the tracked objects, for at
    most `timeout_s`. True when none are left."""
    end = time.monotonic() + timeout_s
    while _held():
        if time.monotonic() >= end:
            print(
                f"rbln-ccl: exiting while gloo still holds {_held()} tensors or jobs of "
                f"unfinished collectives (wait() on every work before exit)",
                file=sys.stderr,
            )
            return False
        time.sleep(0.001)
    return True
