"""The `rbln` backend of torch.compile (SPEC J)."""

from .backend import (  # noqa: F401
    DYNAMIC_SHAPE_MESSAGE,
    CompiledGraph,
    compile_failures,
    compiled_programs,
    rbln_backend,
    reset,
)
