"""Host memory for the NPU (SPEC F): huge pre-faulted buffers and offload."""

import contextlib
import ctypes
import mmap
import os
import tempfile
import weakref

import torch

from . import _C

_HUGE_ALIGN = 2 << 20


def huge_host_empty(nbytes: int) -> torch.Tensor:
    """A uint8 CPU tensor of `nbytes` aligned to 2 MiB, its pages already
    faulted in (transparent huge pages requested), which the device can DMA
    without a staging copy; it reports is_pinned() (SPEC F2)."""
    if not isinstance(nbytes, int) or nbytes <= 0:
        raise ValueError(f"huge_host_empty needs a positive byte count, got {nbytes!r}")
    size = (nbytes + _HUGE_ALIGN - 1) // _HUGE_ALIGN * _HUGE_ALIGN
    buf = mmap.mmap(-1, size + _HUGE_ALIGN, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    offset = (-base) % _HUGE_ALIGN
    if hasattr(mmap, "MADV_HUGEPAGE"):
        try:
            buf.madvise(mmap.MADV_HUGEPAGE, offset, size)
        except OSError:
            pass  # THP disabled: ordinary pages, still aligned and faulted in.
    t = torch.frombuffer(memoryview(buf)[offset : offset + nbytes], dtype=torch.uint8)
    t[:: mmap.PAGESIZE].zero_()  # Fault every page in now, not at first DMA.
    address = base + offset
    _C._register_pinned_region(address, nbytes)
    weakref.finalize(t, _C._unregister_pinned_region, address)
    return t


def _offload_dir(path):
    if path is None:
        path = os.environ.get("RBLN_OFFLOAD_DIR") or os.path.join(
            tempfile.gettempdir(), f"rbln-offload-{os.getpid()}"
        )
    os.makedirs(path, exist_ok=True)
    if not os.access(path, os.W_OK):
        raise PermissionError(f"offload directory {path} is not writable; set RBLN_OFFLOAD_DIR")
    return path


@contextlib.contextmanager
def offload(path=None):
    """Host regions of rbln tensors allocated inside the block are backed by
    files under `path` (default $RBLN_OFFLOAD_DIR, else a temp dir), each
    removed when its tensor's storage is released (SPEC F3). Yields the dir."""
    directory = _offload_dir(path)
    previous = _C._set_offload_dir(directory)
    try:
        yield directory
    finally:
        _C._set_offload_dir(previous)
