"""The rbln backend's options (SPEC J5: torch.compile(backend="rbln",
options=...)) and its INFO log (TORCH_RBLN_LOG_LEVEL)."""

import os
import sys

import torch

from .. import _C
from . import host_ops as _host_ops

# Options handed to the compiler (SPEC J5).
_MODES = ("default", "compile_only")
_KNOWN_OPTIONS = ("num_devices", "cache_dir", "mode", "npu", "host_ops", "compile_per_shape")


def log_info(message: str) -> None:
    level = os.environ.get("TORCH_RBLN_LOG_LEVEL", "WARNING").upper()
    if level in ("INFO", "DEBUG"):
        print(f"[TORCH-RBLN][INFO] {message}", file=sys.stderr, flush=True)


class Options:
    def __init__(self, options):
        options = dict(options or {})
        unknown = sorted(set(options) - set(_KNOWN_OPTIONS))
        if unknown:
            raise ValueError(
                f"rbln backend: unknown option(s) {unknown}; "
                f"torch.compile(backend='rbln', options=...) takes {list(_KNOWN_OPTIONS)}"
            )
        self.mode = options.get("mode", "default")
        if self.mode not in _MODES:
            raise ValueError(f"rbln backend: option mode={self.mode!r} is not one of {list(_MODES)}")
        self.num_devices = options.get("num_devices")
        if self.num_devices is not None and (
            not isinstance(self.num_devices, int) or self.num_devices < 1
        ):
            raise ValueError(
                f"rbln backend: option num_devices={self.num_devices!r} must be a positive int "
                "(the RSD group size)"
            )
        self.npu = options.get("npu")
        self._npus_by_device = {}  # Logical device index -> NPUs per program.
        # The device the graph was captured on (from the example inputs).
        self.compile_device = None
        self.host_ops = _host_ops.parse_mode(options.get("host_ops"))
        self.cache_dir = self._check_cache_dir(options.get("cache_dir"))
        # A graph captured with symbolic sizes (torch._dynamo.mark_dynamic)
        # compiles one static program per concrete shape it is called with,
        # also when it computes with sizes: the caller promises a few shapes
        # (a server's buckets) and saves a Dynamo capture and an aot_autograd
        # trace per shape. Off by default: dynamic=True graphs that compute
        # with sizes fail on their second shape (SPEC J2).
        self.compile_per_shape = options.get("compile_per_shape", False)
        if not isinstance(self.compile_per_shape, bool):
            raise ValueError(
                f"rbln backend: option compile_per_shape={self.compile_per_shape!r} must be "
                "True or False"
            )
        self._check_npu()

    @staticmethod
    def _check_cache_dir(cache_dir):
        """The compiler's on-disk program cache for this compile (SPEC J5):
        created if missing; must be a writable directory. "" / None: the
        compiler's default (RBLN_COMPILER_CACHE_DIR, or no disk cache)."""
        if cache_dir is None or cache_dir == "":
            return ""
        if not isinstance(cache_dir, (str, os.PathLike)):
            raise ValueError(
                f"rbln backend: option cache_dir={cache_dir!r} must be a directory path (str)"
            )
        path = os.path.abspath(os.fspath(cache_dir))
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as e:
            raise ValueError(
                f"rbln backend: option cache_dir={cache_dir!r}: cannot create the directory "
                f"({e.strerror}); pass a writable directory"
            ) from None
        if not os.access(path, os.W_OK | os.X_OK):
            raise ValueError(
                f"rbln backend: option cache_dir={cache_dir!r} is not writable; the compiler "
                "stores compiled programs there, pass a writable directory"
            )
        return path

    def _check_npu(self):
        if self.npu is None:
            return
        profile = _C._device_profile()["name"]
        if str(self.npu).lower() != profile.lower():
            raise ValueError(
                f"rbln backend: option npu={self.npu!r} does not match the device, "
                f"which is a {profile!r} NPU (RBLN_SIM_PROFILE); compile for npu={profile!r} "
                "or run on a matching device"
            )

    def npus_for(self, device: torch.device) -> int:
        """The NPUs a program for `device` is split over (SPEC A7, J5): the
        logical device's whole RSD group, or `num_devices` of it (its first
        NPUs). More than the group has is an error naming the group and the
        fix."""
        index = device.index if device.index is not None else _C._current_device()
        npus = self._npus_by_device.get(index)
        if npus is not None:
            return npus  # The device map is fixed once committed.
        group = _C._device_map()["devices"][index]
        npus = len(group) if self.num_devices is None else self.num_devices
        if npus > len(group):
            raise ValueError(
                f"rbln backend: option num_devices={self.num_devices} but {device} groups "
                f"{len(group)} NPU(s) (physical {group}); use num_devices <= {len(group)} "
                f"(or leave it out to split over the whole group), or a logical device with "
                f"a larger group (RBLN_NPUS_PER_DEVICE / RBLN_DEVICE_MAP on ATOM; several "
                "Rebel100 cards need torch.distributed with rbln-ccl)"
            )
        self._npus_by_device[index] = npus
        return npus
