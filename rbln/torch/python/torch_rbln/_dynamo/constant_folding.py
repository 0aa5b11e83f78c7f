"""Constant folding of ATen FX graphs before conversion to the IR.

Nodes that depend on no graph input (the causal mask of attention:
`ones -> tril -> where(mask, 0, -inf)`, `arange` positions, scalar tensors)
are computed once on the CPU at compile time. Their results become constant
program inputs, moved to the device once per graph (like weights, never baked
into code), so the compiler sees only the per-call computation.
"""

import operator

import torch

# Results larger than this stay in the graph (they would cost device memory
# per graph; computing them on the device is cheaper).
MAX_FOLDED_ELEMENTS = 1 << 22


def _is_foldable_op(target) -> bool:
    if target is operator.getitem:
        return True
    if not isinstance(target, torch._ops.OpOverload):
        return False
    if torch.Tag.nondeterministic_seeded in target.tags:
        return False  # Random ops must run every call.
    schema = target._schema
    if schema.name.startswith("aten::empty"):
        return False  # Uninitialized memory is not a constant.
    # Ops that write their arguments are not values.
    return not any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)


def _on_cpu(value):
    if isinstance(value, torch.device):
        return torch.device("cpu")
    if isinstance(value, (list, tuple)):
        return type(value)(_on_cpu(v) for v in value)
    return value


def _small(value) -> bool:
    if isinstance(value, torch.Tensor):
        return value.numel() <= MAX_FOLDED_ELEMENTS
    if isinstance(value, (list, tuple)):
        return all(_small(v) for v in value)
    return True


def fold_constants(gm: torch.fx.GraphModule) -> dict:
    """Returns {node: CPU value} for every call_function node whose inputs are
    all constants (get_attr tensors or folded nodes)."""
    # Compilers run inside the tracer's fake mode; constants are real.
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():
        return _fold(gm)


def _fold(gm):
    folded = {}
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            obj = gm
            for part in node.target.split("."):
                obj = getattr(obj, part)
            if isinstance(obj, torch.Tensor):
                folded[node] = obj.detach().cpu()
            continue
        if node.op != "call_function" or not _is_foldable_op(node.target):
            continue
        deps = node.all_input_nodes
        if any(d not in folded for d in deps):
            continue
        args = torch.fx.node.map_arg(node.args, lambda n: folded[n])
        kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: folded[n])
        kwargs = {k: _on_cpu(v) for k, v in kwargs.items()}
        try:
            value = node.target(*_on_cpu(args), **kwargs)
        except Exception:  # noqa: BLE001 -- not foldable on CPU: leave it
            continue
        if _small(value):
            folded[node] = value
    # get_attr tensors are handled by the converter as they are.
    return {n: v for n, v in folded.items() if n.op == "call_function"}
