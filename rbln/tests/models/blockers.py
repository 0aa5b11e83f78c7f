"""What keeps a (model, mode) of the model suite from passing today, each with
a cheap probe: a tiny function with the model's pattern, compiled with the
rbln backend (or run eagerly on rbln).

A blocked (model, mode) first asks its blockers' probes. While one still
fails, the test raises `Blocked` at once (a strict expected failure costing a
tiny compile, not a whole model's capture). Once all of them pass, the test
runs for real: it then passes (pytest reports "unexpectedly passed", and the
model's `blocked` entry in model_zoo.py goes) or shows what blocks it next.
The probes go through the real backend, so a decomposition that removes an
op from the graphs clears its blocker as well as a compiler that gains it.
"""

import dataclasses
import functools
import warnings
from typing import Callable

import torch
import torch.nn.functional as F  # noqa: F401 -- for the probes of blockers declared here

DEV = "rbln:0"


class Blocked(Exception):
    """A (model, mode) failed in a way its spec declares as blocked: a compile
    failure of the rbln compiler, or an op without an rbln kernel. Any other
    failure (a wrong value, a crash) is a real test failure."""


@dataclasses.dataclass(frozen=True)
class Blocker:
    description: str  # What is missing, as the report names it.
    probe: Callable[[], None]  # Raises while the blocker is present.

    def present(self) -> bool:
        return _probe_fails(self.probe)


@functools.lru_cache(maxsize=None)
def _probe_fails(probe) -> bool:
    try:
        probe()
    except Exception:  # noqa: BLE001 -- any failure means still blocked
        return True
    return False


def _h(*shape, low=None):
    g = torch.Generator().manual_seed(0)
    t = torch.randn(*shape, generator=g)
    if low is not None:
        t = t.abs() + low
    return t.half().to(DEV)


def _compiles(fn, *args):
    """fn compiles through the rbln backend to device programs only (no
    host op, no CPU fallback) and runs."""
    from torch_rbln import _dynamo as rbln_dynamo

    torch._dynamo.reset()
    before = torch.rbln.counters()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.compile(fn, backend="rbln", dynamic=False,
                          options={"host_ops": "none"})(*args)
        after = torch.rbln.counters()
        for key in ("graph/cpu_fallback", "graph/host_ops"):
            if after.get(key, 0) != before.get(key, 0):
                raise RuntimeError(f"{key} while probing")
        if rbln_dynamo.compile_failures():
            raise RuntimeError(str(rbln_dynamo.compile_failures()[0][1]))
    finally:
        torch._dynamo.reset()


def _eager(fn, *args):
    with torch.no_grad():
        fn(*args).cpu()


def _idx(n, high):
    return torch.randint(0, high, (n,), generator=torch.Generator().manual_seed(0)).to(DEV)


# Blockers are declared here, next to their probes, while a (model, mode) of
# model_zoo.py waits for them; e.g.
#   CONV2D = Blocker("convolution (2-d, strided)", lambda: _compiles(
#       lambda x, w: F.conv2d(x, w, stride=2) * 2, _h(1, 3, 16, 16), _h(8, 3, 3, 3)))
# (_eager and _idx probe eager kernels and index inputs the same way.)


def describe(blockers) -> str:
    return "blocked by: " + "; ".join(b.description for b in blockers)


def raise_if_blocked(blockers):
    """Raises Blocked naming the blockers whose probes still fail."""
    present = [b for b in blockers if b.present()]
    if present:
        raise Blocked(describe(present) + " (probed)")
