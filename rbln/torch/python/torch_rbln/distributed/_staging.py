"""Host staging of one collective's tensors: D2H into pinned host buffers
before the exchange, H2D back afterwards, counted in the ccl/* counters."""

from __future__ import annotations

from typing import List, Sequence

import torch

from .. import _C
from ._exit_drain import track_tensors

# Staging buffers come from the rbln pinned host allocator (page-aligned,
# mlocked where allowed), one per tensor per collective; that allocator does
# not cache, so a reusable staging pool would save an mmap per transfer.
_PIN_STAGING = True


def bump_counter(name: str, delta: int = 1) -> None:
    _C._counter_add(name, delta)


class Staging:
    """The host copies of one collective's tensors and how to write back.

    All tensors of one collective must be on one device: one logical rbln
    device, or the CPU (SPEC B4).
    """

    def __init__(self, collective: str, tensors: Sequence[torch.Tensor]):
        self.collective = collective
        devices = {t.device for t in tensors}
        for t in tensors:
            if t.device.type not in ("rbln", "cpu"):
                raise ValueError(
                    f"rbln-ccl: {collective} got a tensor on {t.device}; the rbln-ccl process "
                    f"group moves tensors on rbln devices (or the CPU). Move it first with "
                    f".to('rbln') or use a process group for {t.device.type}."
                )
        if len(devices) > 1:
            names = ", ".join(sorted(str(d) for d in devices))
            raise ValueError(
                f"rbln-ccl: {collective} got tensors on several devices ({names}); all tensors "
                f"of one collective must be on one device (SPEC B4). Move them with .to(...)."
            )
        self.device = next(iter(devices)) if devices else torch.device("cpu")
        self.on_device = self.device.type == "rbln"
        # (device tensor, host buffer) pairs to copy back after the exchange.
        self._copy_back: List[tuple] = []
        # Objects that must live until the collective completes.
        self.keep_alive: List[object] = []

    @staticmethod
    def _new_host(t: torch.Tensor) -> torch.Tensor:
        """A pinned host buffer shaped like `t`, about to be handed to gloo."""
        host = torch.empty(t.shape, dtype=t.dtype, pin_memory=_PIN_STAGING)
        track_tensors([host])
        return host

    def host_input(self, t: torch.Tensor) -> torch.Tensor:
        """A host tensor with `t`'s values (D2H when `t` is on rbln)."""
        if not self.on_device:
            track_tensors([t])
            return t
        host = self._new_host(t)
        host.copy_(t)
        bump_counter("ccl/d2h_copies")
        bump_counter("ccl/d2h_bytes", host.numel() * host.element_size())
        return host

    def host_output(self, t: torch.Tensor, initial: bool = False) -> torch.Tensor:
        """A host buffer gloo writes into, copied to `t` afterwards.

        `initial` seeds it with `t`'s values (in-place collectives).
        """
        if not self.on_device:
            track_tensors([t])
            return t
        host = self.host_input(t) if initial else self._new_host(t)
        self._copy_back.append((t, host))
        return host

    def host_inout(self, t: torch.Tensor) -> torch.Tensor:
        return self.host_output(t, initial=True)

    def finish(self) -> None:
        """Copies gloo's results to the device tensors (H2D)."""
        for dev, host in self._copy_back:
            dev.copy_(host)
            bump_counter("ccl/h2d_copies")
            bump_counter("ccl/h2d_bytes", host.numel() * host.element_size())
