"""CPU copies of device tensors that a compiled graph reads on the host.

The compile_error fallback (cpu_fallback.py) runs a whole Dynamo graph on the CPU,
and a host op (host_ops.py) runs one ATen op there. Their inputs include
module parameters and buffers that live on rbln and rarely change: copying
them to the host on every call would cost a device read per parameter per
call. `HostCopies` keeps one CPU copy per graph input slot and reuses it while
the device tensor is unchanged, i.e. while the slot holds a tensor

  * over the same storage (the entry keeps that storage alive, so its address
    cannot be reused by another one), with the same offset, sizes, strides
    and dtype, and
  * with the same version counter (`Tensor._version`): every in-place write
    through PyTorch (an optimizer step, `copy_` under no_grad, a graph that
    mutates a buffer) bumps it.

Writes that bypass the version counter (`param.data.copy_(...)`, which
autograd does not see either) are not detected. Inference tensors have no
version counter; they are downloaded on every call.

Copies of tensors that require grad under grad mode are returned through
`_HostView`, so that gradients still flow back to the device tensor.
"""

import torch

from .. import _C


class _HostView(torch.autograd.Function):
    """The cached CPU copy in the forward; the gradient goes back to the
    device tensor's device in the backward (like `Tensor.cpu()`'s)."""

    @staticmethod
    def forward(ctx, device_tensor, host_copy):
        ctx.device = device_tensor.device
        return host_copy.detach()

    @staticmethod
    def backward(ctx, grad):
        return grad.to(ctx.device), None


def _version(t):
    try:
        return t._version
    except RuntimeError:  # An inference tensor: no version counter.
        return None


def _layout(t):
    return (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape),
            t.stride(), t.dtype)


class _Entry:
    __slots__ = ("device_tensor", "layout", "version", "host")

    def __init__(self, device_tensor, version, host):
        self.device_tensor = device_tensor  # Keeps the storage alive.
        self.layout = _layout(device_tensor)
        self.version = version
        self.host = host


class HostCopies:
    """CPU copies of device tensors, one per input slot (any hashable key),
    reused across calls until the tensor changes. Counts
    graph/host_copies/downloaded and graph/host_copies/reused."""

    def __init__(self):
        self._entries = {}

    def get(self, slot, t):
        """A CPU tensor with `t`'s data (t itself if not on rbln) and the
        number of device bytes read for it (0 when the copy was reused)."""
        if not isinstance(t, torch.Tensor) or t.device.type != "rbln":
            return t, 0
        version = _version(t)
        entry = self._entries.get(slot)
        if (entry is not None and version is not None and entry.version == version
                and entry.layout == _layout(t)):
            _C._counter_add("graph/host_copies/reused", 1)
            host = entry.host
            nbytes = 0
        else:
            with torch.no_grad():
                host = t.detach().cpu()
            nbytes = t.numel() * t.element_size()
            _C._counter_add("graph/host_copies/downloaded", 1)
            if version is None:
                self._entries.pop(slot, None)
            else:
                self._entries[slot] = _Entry(t, version, host)
        if t.requires_grad and torch.is_grad_enabled():
            return _HostView.apply(t, host), nbytes
        return host, nbytes

    def bytes_to_read(self, slot, t) -> int:
        """Device bytes `get(slot, t)` would read now (0 if it reuses)."""
        if not isinstance(t, torch.Tensor) or t.device.type != "rbln":
            return 0
        entry = self._entries.get(slot)
        version = _version(t)
        if (entry is not None and version is not None and entry.version == version
                and entry.layout == _layout(t)):
            return 0
        return t.numel() * t.element_size()

    def written_back(self, slot, t):
        """`t` (the device tensor of `slot`) was just overwritten with the
        slot's CPU copy: the copy is current again."""
        entry = self._entries.get(slot)
        if entry is not None and entry.layout == _layout(t):
            entry.version = _version(t)

    def clear(self):
        self._entries.clear()
