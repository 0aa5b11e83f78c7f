"""The work object rbln-ccl collectives return."""

from __future__ import annotations

import datetime
from typing import Sequence

import torch
import torch.distributed as dist


class CclWork(dist.Work):
    """An rbln-ccl work: done when its future is, and wait() raises the
    collective's error (the work of _create_work_from_future swallows it)."""

    def __init__(self, future: torch.futures.Future, errors: Sequence[BaseException] = ()):
        super().__init__()
        self._future = future
        # The error the completion recorded, raised as is: the future wraps
        # it in "Got the following error when running the callback".
        self._errors = errors

    def wait(self, timeout: datetime.timedelta = datetime.timedelta(0)) -> bool:
        # timeout: gloo enforces the process group's timeout on the exchange.
        try:
            self._future.wait()
        except Exception as e:
            if self._errors:
                raise self._errors[0] from e
            raise
        return True

    def get_future(self) -> torch.futures.Future:
        return self._future

    def is_completed(self) -> bool:
        return self._future.done()

    def is_success(self) -> bool:
        if not self._future.done():
            return False
        try:
            self._future.wait()
        except Exception:  # noqa: BLE001 -- a failed collective
            return False
        return True

    def exception(self):
        try:
            self._future.wait()
        except Exception as e:  # noqa: BLE001
            return e
        return None
