"""vllm-rbln: vLLM on the rbln device (torch-rbln), as a platform plugin.

vLLM calls `register()` through the `vllm.platform_plugins` entry point. The
plugin takes over when torch-rbln sees an rbln device, unless vLLM is told to
use the CPU (`VLLM_TARGET_DEVICE=cpu`, which vLLM checks before any plugin)
or another device (`VLLM_TARGET_DEVICE` other than its default `cuda` and
`rbln`). `VLLM_RBLN=0` turns it off.
"""

import os

__all__ = ["register"]


def register():
    """The platform class vLLM should use, or None to leave the choice to it."""
    if os.environ.get("VLLM_RBLN", "1").strip().lower() in ("0", "false", "off", "no"):
        return None
    if os.environ.get("VLLM_TARGET_DEVICE", "cuda").strip().lower() not in ("cuda", "rbln"):
        return None
    try:
        import torch

        if not torch.rbln.is_available():
            return None
    except (ImportError, AttributeError):  # torch-rbln not installed.
        return None
    return "vllm_rbln.platform.RblnPlatform"
