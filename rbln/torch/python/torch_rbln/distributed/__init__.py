"""The `rbln-ccl` process group for torch.distributed (SPEC A8).

Registered at import of torch_rbln as the backend for device "rbln", so
`dist.init_process_group("rbln-ccl")`, `"cpu:gloo,rbln:rbln-ccl"` and, with
rbln the current accelerator, a bare `init_process_group()` all use it. One
card per process: each rank picks its card with RBLN_VISIBLE_DEVICES. The
data path is in docs/distributed.md and process_group.py.
"""

import torch.distributed as dist

from .process_group import BACKEND_NAME, ProcessGroupRbln

__all__ = ["BACKEND_NAME", "ProcessGroupRbln", "register"]


def _create_process_group(common_opts, backend_opts) -> ProcessGroupRbln:
    # extended_api=True: torch passes c10d::DistributedBackendOptions.
    return ProcessGroupRbln(
        common_opts.store, common_opts.group_rank, common_opts.group_size, common_opts.timeout
    )


def register() -> None:
    """Registers `rbln-ccl` with torch.distributed (idempotent)."""
    if not dist.is_available() or BACKEND_NAME.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(
        BACKEND_NAME, _create_process_group, extended_api=True, devices=["rbln"]
    )
