"""Grouped-query attention in captured graphs: the key/value heads before
transformers' `repeat_kv`.

Models with fewer key/value heads than query heads (Llama, Qwen, Mistral)
call sdpa under torch.compile with k and v repeated to the query's heads:
`repeat_kv` is unsqueeze(x, -3) -> expand([..., Hkv, G, S, E]) -> clone ->
view([..., Hkv * G, S, E]), a copy of the whole (static) KV cache, G times
over, on every call. The attention converter runs grouped heads without it
(`enable_gqa`: query head h reads key/value head h // G), so fx_to_ir hands
it the tensors before the repeat and the copy becomes dead code."""

import torch

aten = torch.ops.aten

ATTENTION_OPS = frozenset({
    aten._scaled_dot_product_flash_attention_for_cpu.default,
    aten.scaled_dot_product_attention.default,
})
_VIEWS = frozenset({aten.view.default, aten._unsafe_view.default, aten.reshape.default})


def _shape(node):
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return tuple(val.shape) if isinstance(val, torch.Tensor) else None


def _before_repeat(node):
    """(x, G) when `node` is x [..., Hkv, S, E] repeated to [..., Hkv * G, S, E]
    by repeat_kv's ops, else None."""
    if not (isinstance(node, torch.fx.Node) and node.op == "call_function"
            and node.target in _VIEWS):
        return None
    src = node.args[0]
    if getattr(src, "target", None) is aten.clone.default:
        src = src.args[0]
    if getattr(src, "target", None) is not aten.expand.default:
        return None
    unsqueezed = src.args[0]
    if getattr(unsqueezed, "target", None) is not aten.unsqueeze.default:
        return None
    x = unsqueezed.args[0]
    shape, expanded, out = _shape(x), _shape(src), _shape(node)
    if shape is None or expanded is None or out is None or len(shape) < 3:
        return None
    rank = len(shape)
    dim = unsqueezed.args[1] if len(unsqueezed.args) > 1 else unsqueezed.kwargs.get("dim")
    if dim not in (rank - 2, -3):
        return None
    group = expanded[rank - 2]
    if (expanded[:rank - 2] != shape[:rank - 2] or expanded[rank - 1:] != shape[rank - 2:]
            or out != shape[:rank - 3] + (shape[rank - 3] * group,) + shape[rank - 2:]):
        return None
    return x, group


def ungrouped_kv(node):
    """For an attention node whose key and value are both repeat_kv'd by the
    same group: (key, value) before the repeat; else None."""
    if node.target not in ATTENTION_OPS or len(node.args) < 3:
        return None
    k, v = _before_repeat(node.args[1]), _before_repeat(node.args[2])
    if k is None or v is None or k[1] != v[1] or k[1] == 1:
        return None
    return k[0], v[0]
