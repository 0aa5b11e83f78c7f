"""`torch.rbln.Stream`, `Event` and the current stream (SPEC M1-M5).

They subclass the generic `torch.Stream` / `torch.Event`, whose methods go
through the rbln device guard (`rbln/torch/csrc/guard.cc`), like
`torch.cuda.Stream` / `Event` do for CUDA:

* a stream is a FIFO of device work run in submission order by its own
  worker; `query()` is per stream;
* `event.record(s)` marks the end of `s`'s queued work; `other.wait_event(e)`
  makes `other`'s later work wait on the device side (the host does not block);
* `Event(enable_timing=True).elapsed_time(end)` is the device time between
  two events (timestamps are taken when the stream reaches them).

What runs asynchronously: `non_blocking=True` host<->device copies that
qualify (SPEC L1), event markers and cross-stream fences. Kernels and other
copies run on the calling thread after the current stream's queued work
(and any pending transfer touching their buffers) completed.
"""

import torch

from . import _C

__all__ = [
    "Event",
    "Stream",
    "StreamContext",
    "current_stream",
    "default_stream",
    "set_stream",
    "stream",
]

def _device_index(device) -> int:
    if device is None:
        return _C._current_device()
    if isinstance(device, int):
        return device
    device = torch.device(device)
    if device.type != "rbln":
        raise ValueError(f"expected an rbln device, got {device}")
    return _C._current_device() if device.index is None else device.index


class Stream(torch.Stream):
    """An rbln stream. `Stream()` makes a new stream on the current device;
    `Stream(device)` on `device`; `Stream(stream_id=, device_index=,
    device_type=)` wraps an existing one."""

    def __new__(cls, device=None, priority=0, **kwargs):
        if "stream_id" in kwargs:
            return super().__new__(cls, priority=priority, **kwargs)
        index = _device_index(device)
        return super().__new__(cls, device=torch.device("rbln", index), priority=priority)

    def record_event(self, event=None):
        """Records `event` (a new Event if None) on this stream; returns it."""
        if event is None:
            event = Event()
        event.record(self)
        return event

    def __repr__(self):
        return f"<torch.rbln.Stream device=rbln:{self.device_index} id={self.stream_id}>"


class Event(torch.Event):
    """An rbln event; `enable_timing=True` allows `elapsed_time`."""

    def __new__(cls, enable_timing=False, blocking=False, interprocess=False):
        if interprocess:
            raise NotImplementedError("rbln events cannot be shared between processes")
        event = super().__new__(
            cls,
            device=torch.device("rbln", _C._current_device()),
            enable_timing=enable_timing,
            blocking=blocking,
        )
        event._enable_timing = enable_timing
        return event

    def elapsed_time(self, end_event) -> float:
        """Milliseconds of device time from this event to `end_event`; both
        need enable_timing=True, a record() and completion (synchronize())."""
        if not (self._enable_timing and getattr(end_event, "_enable_timing", True)):
            raise ValueError("elapsed_time needs both events made with enable_timing=True")
        return _C._event_elapsed_ms(self.event_id, end_event.event_id)


def _privateuse1_type() -> int:
    # c10::DeviceType::PrivateUse1.
    return 20


def current_stream(device=None) -> Stream:
    """This thread's current stream on `device` (current device by default)."""
    index = _device_index(device)
    return Stream(stream_id=_C._current_stream_id(index), device_index=index,
                  device_type=_privateuse1_type())


def default_stream(device=None) -> Stream:
    """The default stream (id 0) of `device`."""
    index = _device_index(device)
    return Stream(stream_id=0, device_index=index, device_type=_privateuse1_type())


def set_stream(stream: torch.Stream) -> None:
    """Makes `stream` current on its device for this thread."""
    if stream is None:
        return
    if stream.device.type != "rbln":
        raise ValueError(f"expected an rbln stream, got one on {stream.device}")
    _C._set_stream(stream.stream_id, stream.device_index)


class StreamContext:
    """Makes `stream` current (and its device current) inside the block;
    restores both on exit. `None` is a no-op, as for torch.cuda."""

    def __init__(self, stream):
        self.stream = stream
        self._saved = None

    def __enter__(self):
        if self.stream is None:
            return None
        index = self.stream.device_index
        self._saved = (_C._current_device(), index, _C._current_stream_id(index))
        if index != self._saved[0]:
            _C._set_device(index)
        set_stream(self.stream)
        return self.stream

    def __exit__(self, exc_type, exc, tb):
        if self._saved is None:
            return False
        device, index, stream_id = self._saved
        _C._set_stream(stream_id, index)
        if device != index:
            _C._set_device(device)
        return False


def stream(stream) -> StreamContext:
    """`with torch.rbln.stream(s):` runs the block with `s` as current stream."""
    return StreamContext(stream)
