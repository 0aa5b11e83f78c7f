"""Eager calls run as one compiled graph program per input signature.

For eager ops the CPU fallback cannot run (dtypes only CUDA has, issue 30):
a function of ATen ops is traced with fake tensors (`make_fx`) and compiled
by the rbln backend with host ops off, once per (key, tensor signature), as
`_optim_kernels` does for the optimizer steps. A compile failure raises with
the caller's message instead of running anything on the CPU.
"""

import threading

import torch

_lock = threading.Lock()
_programs = {}  # (key, tensor signature, device) -> compiled program


def signature(tensors):
    return tuple((t.dtype, tuple(t.shape)) if t is not None else None for t in tensors)


def program(key, fn, tensors, failure_message):
    """The compiled program of `fn(*tensors)` (contiguous tensors; None
    entries are passed as None), which returns a tuple of tensors.
    `failure_message(exception)` says what failed and the fix."""
    device = next(t.device for t in tensors if t is not None)
    full_key = (key, signature(tensors), device)
    with _lock:
        compiled = _programs.get(full_key)
    if compiled is not None:
        return compiled
    from torch.fx.experimental.proxy_tensor import make_fx

    from ._dynamo import backend

    present = [t for t in tensors if t is not None]

    def traced(*args):
        it = iter(args)
        return fn(*(next(it) if t is not None else None for t in tensors))

    gm = make_fx(traced, tracing_mode="fake")(*present)
    # One device program (no host ops); no silent CPU run if it fails.
    compiled = backend.rbln_backend(gm, present, options={"host_ops": "none"})
    failure = getattr(compiled, "failure", None)
    if failure is not None:
        raise RuntimeError(failure_message(failure)) from failure
    with _lock:
        compiled = _programs.setdefault(full_key, compiled)
    return compiled


def run(key, fn, tensors, failure_message):
    """`fn(*tensors)` as a device program (see `program`); its result tuple."""
    tensors = [t.contiguous() if t is not None else None for t in tensors]
    compiled = program(key, fn, tensors, failure_message)
    return compiled(*(t for t in tensors if t is not None))


def clear():
    """Drops the compiled programs."""
    with _lock:
        _programs.clear()
