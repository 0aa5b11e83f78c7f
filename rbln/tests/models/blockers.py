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
import torch.nn.functional as F

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


SIN_COS = Blocker("sin, cos (rotary embeddings)",
                  lambda: _compiles(lambda x: torch.sin(x) * torch.cos(x), _h(8, 64)))
POW_SCALAR = Blocker("pow with a Python-scalar exponent (x.pow(2), x ** 3)",
                     lambda: _compiles(lambda x: x.pow(2) + x ** 3.0, _h(8, 64)))
INDEX = Blocker("index with a tensor (x[idx], rotary table lookup)",
                lambda: _compiles(lambda x, i: x[i] * 2, _h(16, 64), _idx(8, 16)))
INDEX_AFTER_SLICE = Blocker("index after a full slice (x[:, idx])",
                            lambda: _compiles(lambda x, i: x[:, i] * 2, _h(4, 16, 64), _idx(8, 16)))
GATHER = Blocker("gather", lambda: _compiles(
    lambda x, i: torch.gather(x, 1, i) * 2, _h(4, 64), _idx(32, 64).view(4, 8)))
ISINF_ANY = Blocker("isinf, any (float16 overflow guard)",
                    lambda: _compiles(lambda x: torch.where(torch.isinf(x).any(), x - 1, x + 1),
                                      _h(8, 64)))
CONV2D = Blocker("convolution (2-d, strided)",
                 lambda: _compiles(lambda x, w: F.conv2d(x, w, stride=2, padding=1) * 2,
                                   _h(1, 3, 16, 16), _h(8, 3, 3, 3)))
CONV2D_DEPTHWISE = Blocker("convolution (depthwise 7x7, groups = channels)",
                           lambda: _compiles(lambda x, w: F.conv2d(x, w, padding=3, groups=8) * 2,
                                             _h(1, 8, 16, 16), _h(8, 1, 7, 7)))
CONV1D = Blocker("convolution (1-d)",
                 lambda: _compiles(lambda x, w: F.conv1d(x, w, padding=1) * 2,
                                   _h(1, 16, 32), _h(32, 16, 3)))
BATCH_NORM = Blocker("_native_batch_norm_legit_no_training (BatchNorm in eval)",
                     lambda: _compiles(lambda x, m, v: F.batch_norm(x, m, v, training=False) * 2,
                                       _h(1, 8, 4, 4), _h(8), _h(8, low=0.5)))
MAX_POOL = Blocker("max_pool2d_with_indices",
                   lambda: _compiles(lambda x: F.max_pool2d(x, 3, 2, 1) * 2, _h(1, 8, 16, 16)))
EAGER_CONV = Blocker(
    "eager convolution: aten::convolution_overrideable has no rbln kernel (and no CPU kernel "
    "the boxed fallback could call)",
    lambda: _eager(lambda x, w: F.conv2d(x, w, padding=1), _h(1, 3, 16, 16), _h(8, 3, 3, 3)))


def describe(blockers) -> str:
    return "blocked by: " + "; ".join(b.description for b in blockers)


def raise_if_blocked(blockers):
    """Raises Blocked naming the blockers whose probes still fail."""
    present = [b for b in blockers if b.present()]
    if present:
        raise Blocked(describe(present) + " (probed)")
