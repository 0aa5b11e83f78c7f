"""The `rbln` backend of torch.compile (SPEC J)."""

from .backend import (  # noqa: F401
    DYNAMO_SETTINGS,
    compiled_programs,
    rbln_backend,
    reset,
)
from .compiled_graph import CompiledGraph  # noqa: F401
from .cpu_fallback import DYNAMIC_SHAPE_MESSAGE, compile_failures  # noqa: F401
from .host_ops import SegmentedGraph  # noqa: F401
from .nested_regions import mark_repeated_layers  # noqa: F401
