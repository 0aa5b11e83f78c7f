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


def _shape(node, key="val"):
    """The shape of `node`'s value in its meta[key] ("val" in ATen graphs,
    "example_value" in Dynamo's), or None."""
    val = node.meta.get(key) if isinstance(node, torch.fx.Node) else None
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


_SDPA = torch._C._nn.scaled_dot_product_attention
_ENABLE_GQA = 7  # its position among sdpa's arguments


def _static_shape(node):
    shape = _shape(node, "example_value")
    return shape if shape is not None and all(type(s) is int for s in shape) else None


def expand_grouped_sdpa(gm: torch.fx.GraphModule) -> int:
    """Dynamo graph pass (before aot_autograd): sdpa(q, k, v, ...,
    enable_gqa=True) over fewer key/value heads than query heads becomes sdpa
    over k and v repeated as transformers' repeat_kv does (unsqueeze, expand,
    reshape). ATen has no fused CPU-style backend for unequal heads, so the
    call would decompose into the math path (f32 copies, repeat_interleave,
    softmax); with equal heads it stays one flash op, whose repeated k and v
    fx_to_ir hands the attention unrepeated (ungrouped_kv). transformers
    passes enable_gqa when there is no mask (a plain causal forward). Also
    inside nested compile regions' subgraphs. Returns how many calls it
    rewrote."""
    rewritten = 0
    for module in gm.modules():
        if isinstance(module, torch.fx.GraphModule):
            rewritten += _expand_in(module)
    return rewritten


def _expand_in(gm: torch.fx.GraphModule) -> int:
    graph = gm.graph
    rewritten = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not _SDPA or len(node.args) < 3:
            continue
        args, kwargs = list(node.args), dict(node.kwargs)
        gqa = args[_ENABLE_GQA] if len(args) > _ENABLE_GQA else kwargs.get("enable_gqa", False)
        if gqa is not True:
            continue
        q, k, v = (_static_shape(a) for a in args[:3])
        if q is None or k is None or v is None or len(q) < 3 or len(k) != len(q):
            continue
        heads, kv_heads = q[-3], k[-3]
        if v[-3] != kv_heads or kv_heads == heads or heads % kv_heads or len(v) != len(k):
            continue
        group = heads // kv_heads

        def repeat(x, shape):
            rank = len(shape)
            expanded = shape[:rank - 2] + (group,) + shape[rank - 2:]
            flat = shape[:rank - 3] + (heads,) + shape[rank - 2:]
            u = graph.call_function(torch.unsqueeze, (x, rank - 2))
            e = graph.call_method("expand", (u, *expanded))
            return graph.call_method("reshape", (e, *flat))

        with graph.inserting_before(node):
            args[1], args[2] = repeat(args[1], k), repeat(args[2], v)
        if len(args) > _ENABLE_GQA:
            args[_ENABLE_GQA] = False
        else:
            kwargs.pop("enable_gqa")
        node.args, node.kwargs = tuple(args), kwargs
        rewritten += 1
    if rewritten:
        gm.recompile()
    return rewritten
