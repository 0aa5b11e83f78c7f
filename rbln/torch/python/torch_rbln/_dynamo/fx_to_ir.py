"""ATen FX graph -> the compiler's graph IR (`rbln/compiler/ir/graph.proto`).

The conversion is generic: every `call_function` node's target is an ATen
`OpOverload`, and the node is described from `target._schema` (SPEC J6, the IR
contract):
  * `op` is the schema's base name without namespace, overload and trailing
    `_` (`aten::add_.Tensor` -> `add`);
  * tensor arguments (and tensor lists) become node inputs in schema order;
    a `Tensor?[]` list (index, index_put) gives its tensors as inputs and an
    attribute of its name marking the positions that hold one
    (`x[:, i]` -> indices="0,1");
  * every other argument becomes an attribute named as in the schema: bool,
    int, float, str as themselves, int lists as `"2,3,-1"`, dtypes by name;
    `None`, devices, layouts and memory formats are left out;
  * an optional tensor argument passed as `None` becomes the bool attribute
    `has_<name>` = false, so the inputs that remain are unambiguous
    (`native_layer_norm(x, None, bias)` has inputs (x, bias) and
    `has_weight` false);
  * outputs carry each result's dtype and static shape; multi-output ops list
    all results in schema order (`getitem` picks one), leaving out results
    that are `None` (`convolution_backward`'s ungated gradients: the op's
    attributes say which are computed) and empty results that are no IR
    result: of a dtype the IR lacks, or batch norm's uint8 reserve (empty on
    every device but cuDNN's); a graph output makes them afresh.
So ops the compiler learns later need no change here. Unconvertible graphs
raise `GraphConversionError` naming the node and why.
"""

import operator
from dataclasses import dataclass, field

import torch

from . import grouped_attention as _grouped_attention

# Names the compiler (and the eager shim, compiled_ops.cc) use for ATen ops
# whose schema name differs from the op the compiler implements.
_IR_OP_ALIASES = {
    "_softmax": "softmax",
    "_log_softmax": "log_softmax",
    # transformers' MoE op (transformers.integrations.moe, what its experts
    # multiply with outside bfloat16): _grouped_mm's 2-D x 3-D form, its
    # arguments (input, weight, offs) in _grouped_mm's order; the compiler's
    # grouped GEMM converter takes both.
    "grouped_mm_fallback": "_grouped_mm",
    # rbln::grouped_mm: what eager _grouped_mm traces (torch_rbln/_grouped_mm.py).
    "grouped_mm": "_grouped_mm",
}

# Ops that only alias their input: in a functional graph the value is the
# input itself (the frontend copies graph outputs that are inputs).
IDENTITY_OPS = frozenset({"alias", "detach", "view_of", "lift_fresh_copy"})

# Views into the input's storage by explicit strides (see _rebase_as_strided).
_AS_STRIDED_OPS = frozenset({"as_strided", "as_strided_copy", "as_strided_scatter"})

# Binary ops take a scalar second operand as "other" (compiled_ops.cc does
# the same for eager calls).
_SCALAR_OPERAND_ALIASES = {"exponent": "other"}

DTYPE_NAMES = {
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
    torch.float32: "float32",
    torch.int32: "int32",
    torch.int64: "int64",
    torch.bool: "bool",
    torch.int8: "int8",
    torch.int16: "int16",
    torch.uint8: "uint8",
}


def _is_reserve(op, v):
    """Batch norm's reserve result: the IR's batch norm ops do not produce it."""
    return v.dtype == torch.uint8 and "batch_norm" in op


@dataclass(frozen=True)
class EmptyResult:
    """An op result with no elements of a dtype the IR lacks."""

    dtype: torch.dtype
    shape: tuple


class GraphConversionError(RuntimeError):
    """The FX graph has something the IR cannot describe (not an op gap)."""


class DynamicShapeError(GraphConversionError):
    """The graph computes with symbolic sizes."""


@dataclass
class IrGraph:
    """Plain-Python form of ir::Graph, as `torch_rbln._C._graph_compile` takes it."""

    name: str
    inputs: list = field(default_factory=list)  # (name, dtype, shape)
    nodes: list = field(default_factory=list)  # (op, inputs, outputs, attrs)
    outputs: list = field(default_factory=list)  # value names
    # Which FX placeholder (index) or constant (get_attr target) feeds each
    # graph input, in order.
    input_sources: list = field(default_factory=list)
    # For each FX output: ("value", ir output index), ("input", ir input
    # index), ("empty", (dtype, shape)) or ("const", python value).
    output_plan: list = field(default_factory=list)
    # Graph inputs the program writes in place: (ir input name, value name)
    # (graph.proto's Update): aot_autograd's copy_ of a mutated input.
    updates: list = field(default_factory=list)
    # Mutated inputs written back after the run instead: (FX placeholder
    # index, ir output index), where an in-place update cannot be (_copy_).
    write_backs: list = field(default_factory=list)

    def key(self):
        """Hashable identity of the graph: equal keys compile to one program."""
        return (
            tuple((n, d, tuple(s)) for n, d, s in self.inputs),
            tuple(
                (op, tuple(ins), tuple((n, d, tuple(s)) for n, d, s in outs),
                 tuple(sorted(attrs.items())))
                for op, ins, outs, attrs in self.nodes
            ),
            tuple(self.outputs),
            tuple(self.updates),
        )

    def ops(self):
        return [n[0] for n in self.nodes]


def _is_optional_tensor_list(arg) -> bool:
    """A `Tensor?[]` schema argument (the indices of index/index_put)."""
    return str(arg.type) == "List[Optional[Tensor]]"


def ir_op_name(target) -> str:
    """`aten::native_layer_norm.default` -> `native_layer_norm` (IR contract)."""
    name = target._schema.name.split("::", 1)[-1]
    if name.endswith("_") and not name.endswith("__"):
        name = name[:-1]
    return _IR_OP_ALIASES.get(name, name)


def dtype_name(dtype) -> str:
    name = DTYPE_NAMES.get(dtype)
    if name is None:
        raise GraphConversionError(
            f"dtype {dtype} has no rbln device representation "
            f"(supported: {', '.join(DTYPE_NAMES.values())})"
        )
    return name


def _static_shape(t, what):
    shape = []
    for d in t.shape:
        if not isinstance(d, int):
            raise DynamicShapeError(f"{what} has a symbolic size {d}")
        shape.append(d)
    return shape


def _is_optional_tensor(schema_type) -> bool:
    return isinstance(schema_type, torch.OptionalType) and isinstance(
        schema_type.getElementType(), torch.TensorType
    )


def _attr_value(value, what):
    """An attribute value as bool/int/float/str, or None to leave it out."""
    if value is None or isinstance(value, (torch.device, torch.layout, torch.memory_format)):
        return None
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value
    if isinstance(value, str):
        return value
    if isinstance(value, torch.dtype):
        return dtype_name(value)
    if isinstance(value, torch.SymInt) or isinstance(value, torch.SymFloat):
        raise DynamicShapeError(f"{what} is symbolic ({value})")
    if isinstance(value, (list, tuple)):
        if all(isinstance(v, bool) for v in value):
            return ",".join("1" if v else "0" for v in value)
        if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return ",".join(str(v) for v in value)
        if any(isinstance(v, (torch.SymInt, torch.fx.Node)) for v in value):
            raise DynamicShapeError(f"{what} holds symbolic sizes ({value})")
        if all(isinstance(v, (int, float)) for v in value):
            return ",".join(repr(float(v)) for v in value)
    raise GraphConversionError(f"{what} has a value of type {type(value).__name__} ({value!r})")


class _Converter:
    def __init__(self, gm: torch.fx.GraphModule, name: str, value_of, folded):
        self.gm = gm
        self.folded = folded
        self.ir = IrGraph(name=name)
        # FX node -> IR value name (tensors), list of names (multi-output),
        # or a Python constant (non-tensor values such as ints).
        self.env = {}
        self.used_names = set()
        self.value_of = value_of  # node -> example value (FakeTensor, int, ...)

    def fresh(self, base):
        base = "".join(c if c.isalnum() or c == "_" else "_" for c in base) or "v"
        name, i = base, 1
        while name in self.used_names:
            name, i = f"{base}_{i}", i + 1
        self.used_names.add(name)
        return name

    def tensor_value(self, name, t, what):
        return (name, dtype_name(t.dtype), _static_shape(t, what))

    def convert(self):
        placeholder_index = 0
        self.placeholder_index = {}
        for node in self.gm.graph.nodes:
            if node.op == "placeholder":
                self.placeholder_index[node] = placeholder_index
                self._placeholder(node, placeholder_index)
                placeholder_index += 1
            elif node.op == "get_attr":
                self._get_attr(node)
            elif node.op == "call_function":
                self._call_function(node)
            elif node.op == "output":
                self._output(node)
            else:
                raise GraphConversionError(f"FX node {node.name}: unsupported kind {node.op}")
        return self.ir

    def _placeholder(self, node, index):
        val = self.value_of(node)
        if isinstance(val, torch.Tensor):
            name = self.fresh(node.name)
            self.ir.inputs.append(self.tensor_value(name, val, f"input {node.name}"))
            self.ir.input_sources.append(("arg", index))
            self.env[node] = name
        elif isinstance(val, (int, float, bool)) or val is None:
            self.env[node] = val  # Specialized Python value.
        else:
            raise DynamicShapeError(f"input {node.name} is symbolic ({val})")

    def _get_attr(self, node):
        if node.users and all(u in self.folded for u in node.users):
            self.env[node] = None  # Only feeds folded constants.
            return
        obj = self.gm
        for part in node.target.split("."):
            obj = getattr(obj, part)
        if not isinstance(obj, torch.Tensor):
            raise GraphConversionError(f"constant {node.target} is a {type(obj).__name__}")
        # Constants are runtime inputs too (moved to the device once).
        name = self.fresh(node.name)
        self.ir.inputs.append(self.tensor_value(name, obj, f"constant {node.target}"))
        self.ir.input_sources.append(("const", node.target))
        self.env[node] = name

    def _folded_constant(self, node):
        value = self.folded[node]
        if not isinstance(value, torch.Tensor):
            self.env[node] = value if not isinstance(value, (list, tuple)) else None
            return
        if all(u in self.folded for u in node.users):
            self.env[node] = None  # Only feeds other constants.
            return
        name = self.fresh(node.name)
        self.ir.inputs.append(self.tensor_value(name, value, f"constant {node.name}"))
        self.ir.input_sources.append(("tensor", value))
        self.env[node] = name

    def _call_function(self, node):
        if node in self.folded:
            return self._folded_constant(node)
        target = node.target
        if target is torch.ops.aten.copy_.default and not node.users and getattr(
                node.args[0], "op", None) == "placeholder":
            return self._copy_into_input(node)
        if target is operator.getitem:
            src, idx = node.args
            produced = self.env[src]
            if not isinstance(produced, list):
                raise GraphConversionError(f"{node.name}: getitem on a single value")
            self.env[node] = produced[idx]
            return
        if target in _SIZE_QUERIES or not isinstance(target, torch._ops.OpOverload):
            val = self.value_of(node)
            if type(val) in (int, float, bool):
                # A size or arithmetic on sizes, bound to this shape's values
                # (compile_per_shape): a constant of this program.
                self.env[node] = val
                return
            if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)) or (
                "sym" in getattr(target, "__name__", "")
            ):
                raise DynamicShapeError(f"{node.name} computes with sizes ({target})")
            raise GraphConversionError(f"{node.name}: call of {target} is not an ATen op")
        schema = target._schema
        op = ir_op_name(target)
        if op in IDENTITY_OPS and isinstance(self.env.get(node.args[0]), str):
            self.env[node] = self.env[node.args[0]]
            return
        inputs, attrs = [], {}
        args = node.args
        grouped = _grouped_attention.ungrouped_kv(node)
        if grouped is not None:
            # Attention over repeat_kv'd keys/values reads them unrepeated.
            args = (args[0], *grouped, *args[3:])
            attrs["enable_gqa"] = True
        n_args = len(args)
        for i, arg in enumerate(schema.arguments):
            if arg.kwarg_only or i >= n_args:
                if arg.name not in node.kwargs:
                    continue  # Default value: the compiler knows it.
                value = node.kwargs[arg.name]
            else:
                value = args[i]
            what = f"argument {arg.name} of {node.name} ({schema.name})"
            if value is None and _is_optional_tensor(arg.type):
                attrs[f"has_{arg.name}"] = False
                continue
            if isinstance(value, torch.fx.Node):
                produced = self.env[value]
                if isinstance(produced, str):
                    inputs.append(produced)
                    continue
                value = produced  # A specialized non-tensor value.
            elif isinstance(value, (list, tuple)) and _is_optional_tensor_list(arg):
                # Tensor?[] (index, index_put): the tensors are inputs, the
                # attribute marks which positions hold one ("0,1": x[:, i]).
                present = []
                for v in value:
                    produced = self.env[v] if isinstance(v, torch.fx.Node) else v
                    if produced is None:
                        present.append("0")
                    elif isinstance(produced, str):
                        inputs.append(produced)
                        present.append("1")
                    else:
                        raise GraphConversionError(f"{what}: entry {v!r} is neither a tensor nor None")
                attrs[arg.name] = ",".join(present)
                continue
            elif isinstance(value, (list, tuple)) and any(isinstance(v, torch.fx.Node) for v in value):
                if all(isinstance(v, torch.fx.Node) and isinstance(self.env[v], str) for v in value):
                    inputs.extend(self.env[v] for v in value)  # Tensor[] (cat, stack).
                    continue
                value = [self.env[v] if isinstance(v, torch.fx.Node) else v for v in value]
                if any(v is None or isinstance(v, (str, list)) for v in value):
                    raise GraphConversionError(f"{what}: a list mixing tensors and other values")
            attr = _attr_value(value, what)
            if attr is None:
                continue
            name = arg.name
            if isinstance(arg.type, torch.TensorType) or "Tensor" in str(arg.type):
                name = _SCALAR_OPERAND_ALIASES.get(name, name)  # A scalar operand.
            attrs[name] = attr
        if op in _AS_STRIDED_OPS:
            self._rebase_as_strided(node, inputs, attrs)
        val = self.value_of(node)
        if isinstance(val, torch.Tensor):
            name = self.fresh(node.name)
            outputs = [self.tensor_value(name, val, f"result of {node.name}")]
            self.env[node] = name
        elif isinstance(val, (list, tuple)):
            outputs, names = [], []
            for i, v in enumerate(val):
                if v is None:
                    names.append(None)  # Not computed (see the module docstring).
                    continue
                if isinstance(v, torch.Tensor) and v.numel() == 0 and (
                        v.dtype not in DTYPE_NAMES or _is_reserve(op, v)):
                    names.append(EmptyResult(v.dtype, tuple(v.shape)))
                    continue
                if not isinstance(v, torch.Tensor):
                    raise GraphConversionError(f"{node.name}: result {i} is not a tensor ({v!r})")
                name = self.fresh(f"{node.name}_{i}")
                outputs.append(self.tensor_value(name, v, f"result {i} of {node.name}"))
                names.append(name)
            self.env[node] = names
        elif isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            raise DynamicShapeError(f"{node.name} computes with sizes ({schema.name})")
        else:
            raise GraphConversionError(f"{node.name}: result of type {type(val).__name__}")
        self.ir.nodes.append((op, inputs, outputs, attrs))

    def _copy_into_input(self, node):
        """aot_autograd's copy_ of a graph input the graph mutated (its
        `keep_inference_input_mutations`): an update the program writes
        into the input's buffer when the input is a contiguous rbln tensor of
        the value's dtype and shape; else the value is an output that the
        backend copies into the input after the run, as aot_autograd does."""
        dst, src = node.args[0], node.args[1]
        name, value = self.env.get(dst), self.env.get(src)
        if not isinstance(value, str):
            raise GraphConversionError(f"{node.name}: copy_ into an input of a non-tensor value")
        d, v = self.value_of(dst), self.value_of(src)
        in_place = (
            isinstance(name, str) and name != value
            and isinstance(d, torch.Tensor) and d.device.type == "rbln" and d.is_contiguous()
            and d.dtype == v.dtype and tuple(d.shape) == tuple(v.shape)
            and name not in {n for n, _ in self.ir.updates}
            and not self._shares_storage(dst, d))
        if in_place:
            self.ir.updates.append((name, value))
            return
        self.ir.write_backs.append((self.placeholder_index[dst], len(self.ir.outputs)))
        self.ir.outputs.append(value)

    def _shares_storage(self, placeholder, t) -> bool:
        """True if another graph input is a view of `t`'s storage (written
        in place, `t` would change it too)."""
        from torch.multiprocessing.reductions import StorageWeakRef

        mine = StorageWeakRef(t.untyped_storage())
        for other in self.placeholder_index:
            if other is placeholder:
                continue
            o = self.value_of(other)
            if isinstance(o, torch.Tensor) and StorageWeakRef(o.untyped_storage()) == mine:
                return True
        return False

    def _rebase_as_strided(self, node, inputs, attrs):
        """as_strided's strides and storage offset address the input's
        storage, while the program holds each input contiguously from its
        first element.

        On a graph argument, the view reads the argument's storage itself
        (`_storage_input`: one more, flat input) unless it is a view of a
        contiguous argument at the argument's own offset (no storage_offset
        given) lying inside it. An explicit storage_offset is absolute: the
        same graph is called with arguments at other storage offsets (Dynamo
        does not guard on them), so it cannot be rebased to the offset the
        argument had when traced.

        On an intermediate value, the offset becomes relative to its first
        element; a view of a non-contiguous value, or reaching before it,
        cannot be expressed (as_strided_scatter, whose result has the
        input's shape, is treated the same way)."""
        src = node.args[0]
        x = self.value_of(src)
        if not isinstance(x, torch.Tensor):
            return
        base = x.storage_offset()
        explicit = "storage_offset" in attrs
        absolute = attrs.get("storage_offset", base)
        offset = absolute - base
        sizes = [int(v) for v in str(attrs.get("size", "")).split(",") if v != ""]
        strides = [int(v) for v in str(attrs.get("stride", "")).split(",") if v != ""]
        empty = not all(sizes)
        span = 0 if empty else sum((n - 1) * st for n, st in zip(sizes, strides))
        inside = x.is_contiguous() and offset >= 0 and (empty or offset + span < x.numel())
        if (getattr(src, "op", None) == "placeholder" and not empty
                and ir_op_name(node.target) != "as_strided_scatter"
                and (explicit or not inside)):
            # From storage offset 0 (an absolute offset) or from the
            # argument's own offset at run time (the default offset).
            inputs[0] = self._storage_input(src, x, absolute + span + 1 if explicit else span + 1,
                                            explicit)
            attrs["storage_offset"] = absolute if explicit else 0
            return
        if not x.is_contiguous():
            raise GraphConversionError(
                f"{node.name}: as_strided of a non-contiguous tensor (sizes {tuple(x.shape)}, "
                f"strides {x.stride()}): the program holds it contiguously, so the strides "
                "would address other elements; call .contiguous() before as_strided"
            )
        if offset < 0:
            raise GraphConversionError(
                f"{node.name}: as_strided with storage_offset {absolute} reaches "
                f"before its input, a view at storage offset {base} of a larger tensor; "
                "the program has only the input's own elements: pass the base tensor "
                "(or a storage_offset of at least the input's)"
            )
        attrs["storage_offset"] = offset  # Past the end: the compiler says so.

    def _storage_input(self, node, x, length, absolute):
        """An IR input holding `length` elements of graph argument `node`'s
        storage, flat, from storage offset 0 (`absolute`) or from the
        argument's storage offset at run time; backend.run passes
        `arg.as_strided((length,), (1,), start)` and raises if the storage
        is shorter. One input per argument, length and start."""
        key = ("storage", node, length, absolute)
        if key not in self.env:
            name = self.fresh(f"{node.name}_storage")
            self.ir.inputs.append((name, dtype_name(x.dtype), (length,)))
            index = [n for n in self.gm.graph.nodes if n.op == "placeholder"].index(node)
            self.ir.input_sources.append(("arg_storage" if absolute else "arg_storage_from_offset",
                                          index))
            self.env[key] = name
        return self.env[key]

    def _output(self, node):
        (results,) = node.args
        if not isinstance(results, (list, tuple)):
            results = [results]
        for r in results:
            produced = self.env[r] if isinstance(r, torch.fx.Node) else r
            input_names = [name for name, _, _ in self.ir.inputs]
            if isinstance(produced, str) and produced in input_names:
                # A returned input (aot_autograd saves weights for backward
                # this way) is the input tensor itself, not a copy.
                self.ir.output_plan.append(("input", input_names.index(produced)))
            elif isinstance(produced, str):
                self.ir.output_plan.append(("value", len(self.ir.outputs)))
                self.ir.outputs.append(produced)
            elif isinstance(produced, EmptyResult):
                self.ir.output_plan.append(("empty", (produced.dtype, produced.shape)))
            elif isinstance(produced, list):
                raise GraphConversionError(f"output {r} is a tuple of tensors")
            else:
                self.ir.output_plan.append(("const", produced))


# Size queries of a tensor: their values are ints (symbolic while a graph
# is traced with symbolic sizes).
_SIZE_QUERIES = frozenset((torch.ops.aten.sym_size.int, torch.ops.aten.sym_numel.default,
                           torch.ops.aten.sym_stride.int,
                           torch.ops.aten.sym_storage_offset.default))


def fx_to_ir(gm: torch.fx.GraphModule, name: str, value_of=None, folded=None) -> IrGraph:
    """Converts an ATen FX graph; `value_of(node)` gives each node's example
    value (default: `node.meta["val"]`, set by the tracer); `folded` maps
    constant nodes to their values (constant_folding.fold_constants), which
    become constant program inputs."""
    if value_of is None:
        def value_of(node):
            if "val" not in node.meta:
                raise GraphConversionError(f"FX node {node.name} has no example value")
            return node.meta["val"]
    return _Converter(gm, name, value_of, folded or {}).convert()
