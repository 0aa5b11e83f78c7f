"""The `rbln` backend of torch.compile (SPEC J)."""

from .backend import (  # noqa: F401
    DYNAMIC_SHAPE_MESSAGE,
    DYNAMO_SETTINGS,
    CompiledGraph,
    compile_failures,
    compiled_programs,
    rbln_backend,
    reset,
)
from .host_ops import SegmentedGraph  # noqa: F401
