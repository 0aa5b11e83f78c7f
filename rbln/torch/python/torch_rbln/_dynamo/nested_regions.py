"""Nested compile regions (torch.compiler.nested_compile_region): Dynamo
and aot_autograd trace a marked region -- a decoder layer -- once and call it
through `invoke_subgraph` wherever it repeats, so capture costs one layer,
not sixteen. The compiler wants one flat graph (it finds the repeated blocks
itself and compiles each unique one once), so the calls are inlined here,
after aot_autograd and before FX->IR.

A region that mutates its inputs (a static KV cache's index_copy_) reaches
us wrapped in `auto_functionalized_v2`: the subgraph ends in copy_ nodes
into its mutated placeholders, and the wrapper returns the subgraph's
outputs followed by the new value of every base. Inlined, the copy_ nodes
go and their sources stand for those new values, which gives the same
graph aot_autograd makes of the layer traced inline (functional updates,
copied into the graph inputs at its end)."""

import copyreg
import operator
import types

import torch

from . import static_cache

_INVOKE_SUBGRAPH = torch.ops.higher_order.invoke_subgraph
_AUTO_FUNCTIONALIZED_V2 = torch.ops.higher_order.auto_functionalized_v2


class RegionInlineError(Exception):
    """A region call this pass cannot inline (the message says which and
    why); that call is left as it was (the backend then raises)."""


def inline_nested_regions(gm: torch.fx.GraphModule) -> int:
    """Inlines every invoke_subgraph call of `gm` (also the ones inlining
    brings in); returns how many calls it inlined."""
    count = 0
    while True:
        calls = [n for n in gm.graph.nodes if _region_call(n)]
        if not calls:
            break
        for node in calls:
            _inline_call(gm, node)
            count += 1
    if count:
        gm.graph.eliminate_dead_code()
        gm.delete_all_unused_submodules()
        gm.graph.lint()
        gm.recompile()
    return count


def _region_call(node):
    if node.op != "call_function":
        return False
    if node.target is _INVOKE_SUBGRAPH:
        return True
    return node.target is _AUTO_FUNCTIONALIZED_V2 and node.args[:1] == (_INVOKE_SUBGRAPH,)


def _attr(module, target):
    """The attribute a get_attr node's dotted `target` names."""
    for part in target.split("."):
        module = getattr(module, part)
    return module


def _subgraph(gm, node):
    if node.op != "get_attr":
        raise RegionInlineError(f"{node.format_node()}: the subgraph is not a module attribute")
    sub = _attr(gm, node.target)
    if not isinstance(sub, torch.fx.GraphModule):
        raise RegionInlineError(f"{node.target} is a {type(sub).__name__}, not a GraphModule")
    return sub


def _inline_call(gm, node):
    """Checks the call, then inlines it: a call that cannot be inlined
    raises before the graph changes."""
    for user in node.users:
        if user.op != "call_function" or user.target is not operator.getitem:
            raise RegionInlineError(f"{user.format_node()} uses the region call as a whole")
    if node.target is _INVOKE_SUBGRAPH:
        sub_node, _identifier, *operands = node.args
        sub, operands, mutable, bases = _subgraph(gm, sub_node), list(operands), {}, []
    else:
        sub, operands, mutable, bases = _functionalized_operands(gm, node)
    placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(operands):
        raise RegionInlineError(
            f"{node.name}: {len(operands)} operands for {len(placeholders)} subgraph inputs")
    _check_updates(node, sub, mutable)
    outputs, updates = _copy_body(gm, sub, operands, node, mutable)
    for b, value in updates:
        bases[b] = value
    results = outputs + bases
    for user in list(node.users):
        user.replace_all_uses_with(results[user.args[1]])
        gm.graph.erase_node(user)
    gm.graph.erase_node(node)


def _functionalized_operands(gm, node):
    """auto_functionalized_v2(invoke_subgraph, subgraph=, identifier=,
    arg{i}=..., _arg{i}_base_index=b, _all_bases=[...]): arg i is base b.
    Views of a base are not taken (a KV cache's updates are whole-tensor).
    Returns (subgraph, operands, mutated placeholder -> base index, bases);
    the call's results are the subgraph's outputs, then every base."""
    kw = dict(node.kwargs)
    sub = _subgraph(gm, kw["subgraph"])
    bases = list(kw["_all_bases"])
    placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
    operands, mutable = [], {}
    for i, ph in enumerate(placeholders):
        name = f"arg{i}"
        if f"_{name}_base_index" not in kw:
            operands.append(kw.get(name))
            continue
        extra = [k for k in kw if k.startswith(f"_{name}_") and k != f"_{name}_base_index"]
        if extra:
            raise RegionInlineError(
                f"{node.name}: {name} is a view of a mutated base ({', '.join(extra)})")
        b = kw[f"_{name}_base_index"]
        operands.append(None if b is None else bases[b])
        if b is not None:
            mutable[ph] = b
    return sub, operands, mutable, bases


def _check_updates(call, sub, mutable):
    """A mutated input must be written once, by a copy_ no node reads
    after (the form aot_autograd gives kept input mutations), and by no
    other in-place op."""
    written = set()
    for n in sub.graph.nodes:
        if n.op != "call_function":
            continue
        if mutable and _is_update(n, mutable):
            if n.args[0] in written:
                raise RegionInlineError(f"{call.name}: {n.args[0].name} is written twice")
            written.add(n.args[0])
            continue
        for a in n.all_input_nodes:
            if a in written:
                raise RegionInlineError(
                    f"{call.name}: {n.format_node()} reads {a.name} after its update")
        if mutable and _mutates_placeholder(n):
            raise RegionInlineError(
                f"{call.name}: {n.format_node()} mutates a subgraph input in place")


def _copy_body(gm, sub, operands, before, mutable):
    """Copies `sub`'s nodes into `gm` before `before`, placeholders bound to
    `operands`; returns (output values, [(base index, new value)]). With
    `mutable` (placeholder -> base index) the copy_ nodes into those
    placeholders are dropped; their sources are the new values."""
    env = dict(zip([n for n in sub.graph.nodes if n.op == "placeholder"], operands))
    outputs, updates = None, []
    with gm.graph.inserting_before(before):
        for n in sub.graph.nodes:
            if n.op == "placeholder":
                continue
            if n.op == "output":
                outputs = [env[a] if isinstance(a, torch.fx.Node) else a for a in n.args[0]]
            elif n.op == "get_attr":
                env[n] = _copy_attr(gm, sub, n)
            elif mutable and _is_update(n, mutable):
                updates.append((mutable[n.args[0]], env[n.args[1]]))
            else:
                env[n] = gm.graph.node_copy(n, lambda a: env[a])
    return outputs, updates


def _is_update(node, mutable):
    """copy_(placeholder, value) of the same shape and dtype: the form
    aot_autograd gives a kept input mutation."""
    if node.op != "call_function" or node.target is not torch.ops.aten.copy_.default:
        return False
    dst, src = node.args[0], node.args[1]
    if dst not in mutable or not isinstance(src, torch.fx.Node):
        return False
    d, s = dst.meta.get("val"), src.meta.get("val")
    return (isinstance(d, torch.Tensor) and isinstance(s, torch.Tensor)
            and d.shape == s.shape and d.dtype == s.dtype)


def _mutates_placeholder(node):
    schema = getattr(node.target, "_schema", None)
    if schema is None or not schema.is_mutable:
        return False
    for i, arg in enumerate(schema.arguments):
        if arg.alias_info is None or not arg.alias_info.is_write:
            continue
        value = node.args[i] if i < len(node.args) else node.kwargs.get(arg.name)
        if isinstance(value, torch.fx.Node) and value.op == "placeholder":
            return True
    return False


def _copy_attr(gm, sub, node):
    """A constant of the subgraph, registered on `gm` under a fresh name."""
    value = _attr(sub, node.target)
    name = f"_region_{node.target.replace('.', '_')}"
    i = 0
    while hasattr(gm, f"{name}_{i}"):
        if getattr(gm, f"{name}_{i}") is value:
            break
        i += 1
    name = f"{name}_{i}"
    if not hasattr(gm, name):
        if isinstance(value, torch.nn.Module):
            gm.add_submodule(name, value)
        else:
            setattr(gm, name, value)
    copy = gm.graph.get_attr(name)
    copy.meta.update(node.meta)
    return copy


def mark_repeated_layers(model: torch.nn.Module, min_repeats: int = 2) -> int:
    """Marks the repeated layers of `model` -- the children of an
    nn.ModuleList that share one class, at least `min_repeats` of them -- as
    nested compile regions (torch.compiler.nested_compile_region), so that
    aot_autograd traces one of them (and Dynamo too, where the layer's
    inputs let it reuse a trace: tensors, modules and constants, and a
    transformers StaticCache, handed over as the layer's own tensors of it
    by static_cache.py; not other KV cache objects) instead of all. Returns
    how many layers it marked. With gradients on, a layer given a KV cache
    is traced inline (PyTorch cannot differentiate a region that writes
    its inputs).

    Each marked layer's class becomes a subclass of its own whose forward is
    the marked one (same name; isinstance holds): other instances of the
    class and eager calls are unchanged; copies and saved models are not
    marked (mark them again). Not the instance's `forward`
    attribute: PyTorch 2.13 reuses a region traced through a bound method
    with the first layer's parameters (wrong results).

    Dynamo must capture a marked layer whole: in transformers 5.24, GPT-J's
    and T5's layers break the graph inside and Mistral's returns an alias
    of an intermediate, which PyTorch rejects at capture
    (UncapturedHigherOrderOpError / InternalTorchDynamoError); leave such
    models unmarked. GPT-2, Llama, Qwen2, Qwen3-MoE, Mixtral, Bloom,
    Falcon, BERT, ViT and Whisper compile marked, their fp16 logits within
    tolerance of the CPU's (rbln/tests/models/models_regions_test.py)."""
    marked = 0
    for module in model.modules():
        if not isinstance(module, torch.nn.ModuleList):
            continue
        by_class = {}
        for child in module:
            by_class.setdefault(type(child), []).append(child)
        for cls, children in by_class.items():
            if len(children) < min_repeats or cls in _MARKED_CLASSES.values():
                continue
            for child in children:
                child.__class__ = _marked_class(cls)
                # Read at each compiled call (a module walk there would be
                # traced by Dynamo at every layer).
                child._region_layer_idx = static_cache.layer_index(child)
                marked += 1
    static_cache.find_cache_types()
    return marked


# class -> its subclass with a marked forward (one per class, so that the
# regions of every model using the class share their traces).
_MARKED_CLASSES = {}

# marked class -> _Marks: its base class's forward and its regions.
_MARKS = {}

# Leaf values of a region call besides tensors (and the layer itself):
# Dynamo fingerprints such inputs without tracing a pytree flatten.
_CONSTANT_TYPES = (type(None), bool, int, float, str)


class _Marks:
    def __init__(self, cls):
        self.forward = cls.forward
        # A call of other values (a KV cache object): the forward marked.
        self.region = torch.compiler.nested_compile_region(cls.forward)
        # A call of leaves: _flat_call, under a code object of the class's
        # own (Dynamo keys the traces it reuses by code object).
        code = _flat_call.__code__.replace(co_name=f"{cls.__name__}_region",
                                           co_qualname=f"{cls.__qualname__}_region")
        self.flat_region = torch.compiler.nested_compile_region(
            types.FunctionType(code, _flat_call.__globals__))


def _marked_class(cls):
    if cls not in _MARKED_CLASSES:
        marked = type(cls.__name__, (cls,), {
            "forward": _marked_forward,
            "__module__": cls.__module__,
            "__qualname__": cls.__qualname__,
            "__doc__": cls.__doc__,
            "__reduce_ex__": _reduce_as_base,
        })
        _MARKS[marked] = _Marks(cls)
        _MARKED_CLASSES[cls] = marked
    return _MARKED_CLASSES[cls]


def _marked_forward(self, *args, **kwargs):
    """A marked layer's forward. Compiling, a call of tensors, constants
    and tuples of them reaches the region flat: the layer, a string naming
    the call's structure, the leaves. Dynamo then fingerprints the region's
    inputs without tracing a pytree flatten of the keyword arguments at
    every layer (~15 ms of each of a 16-layer Llama's layers). A static KV
    cache reaches it as this layer's tensors of it (static_cache.py), so
    Dynamo reuses one trace for every layer of a generate step too."""
    marks = _MARKS[type(self)]
    if not torch.compiler.is_compiling():
        return marks.forward(self, *args, **kwargs)
    if torch.is_grad_enabled() and static_cache.passes_a_cache(args, kwargs):
        # PyTorch 2.13's invoke_subgraph cannot differentiate a region that
        # writes its inputs, as a KV cache update does ("does not currently
        # support training with in-place input or buffer mutations"): with
        # gradients on, such a layer is traced inline, as if unmarked.
        return marks.forward(self, *args, **kwargs)
    flat = _flatten_call(args, kwargs, self._region_layer_idx)
    if flat is None:
        return marks.region(self, *args, **kwargs)
    return marks.flat_region(self, *flat)


def _flatten_call(args, kwargs, layer_idx=None):
    """[structure, *leaves] of a call whose values are leaves or tuples and
    lists of leaves, else None. The structure names each value in order,
    "-" for a positional one, with "*n" after it for a tuple of n ("+n" a
    list); "@" after it for a static cache, replaced by its `layer_idx`-th
    layer's tensors."""
    names, leaves = [], []
    for key, value in [("-", a) for a in args] + list(kwargs.items()):
        if key != "-" and not key.isidentifier():
            return None  # a **{...} key the structure string could not name
        # Dynamo traces this at every layer: the common cases first.
        if _is_leaf(value):
            leaves.append(value)
        elif isinstance(value, (tuple, list)):
            for v in value:
                if not _is_leaf(v):
                    return None
            key += ("*" if isinstance(value, tuple) else "+") + str(len(value))
            leaves.extend(value)
        else:
            cache_tensors = static_cache.layer_tensors(value, layer_idx)
            if cache_tensors is None:
                return None
            key += "@"
            leaves.extend(cache_tensors)
        names.append(key)
    return [",".join(names)] + leaves


def _is_leaf(value):
    return isinstance(value, (torch.Tensor,) + _CONSTANT_TYPES)


def _unflatten_call(structure, leaves):
    """(args, kwargs) of _flatten_call's result."""
    args, kwargs, i = [], {}, 0
    for name in structure.split(",") if structure else []:
        name, value, i = _unflatten_value(name, leaves, i)
        if name == "-":
            args.append(value)
        else:
            kwargs[name] = value
    return args, kwargs


def _unflatten_value(name, leaves, i):
    """(name, value, next leaf) of one entry of a structure string."""
    if name.endswith("@"):
        n = static_cache.LAYER_TENSORS
        return name[:-1], static_cache.OneLayerCache(*leaves[i:i + n]), i + n
    for sep, kind in (("*", tuple), ("+", list)):
        if sep in name:
            name, n = name.split(sep)
            return name, kind(leaves[i:i + int(n)]), i + int(n)
    return name, leaves[i], i + 1


def _flat_call(layer, structure, *leaves):
    args, kwargs = _unflatten_call(structure, leaves)
    return _MARKS[type(layer)].forward(layer, *args, **kwargs)


def _reduce_as_base(self, protocol):
    """Pickles (and deep-copies) a marked layer as its own class: the mark
    is a compile hint that copies and saved models do not carry (the
    marked class is made at run time; pickle could not name it)."""
    base = type(self).__mro__[1]
    state = object.__reduce_ex__(self, protocol)[2]
    return (copyreg._reconstructor, (base, object, None), state)
