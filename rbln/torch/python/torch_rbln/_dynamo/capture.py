"""What the compiler is given: the decompositions aot_autograd applies to
a captured graph (PyTorch's core ATen ones minus the ops the compiler lowers
itself, plus the backend's own), the Python custom ops inlined before it
traces, and how long Dynamo's capture took."""

import time

import torch

from .. import _device_only_ops
from . import fx_to_ir as _fx_to_ir
from . import loss_decompositions as _loss_decompositions

# What reaches the compiler: aot_autograd decomposes the captured graph with
# PyTorch's own core ATen decompositions (`torch._decomp.
# core_aten_decompositions()`), so composite ops (std, logsumexp, addcmul,
# hardswish, nll_loss, stack, roll, ...) arrive as the ~160 ops tagged
# `torch.Tag.core`, which the compiler implements or reports (SPEC J6).
# Except these, which the compiler lowers itself because their
# decomposition would lose a fused kernel or precision. (Ops with a
# CompositeImplicitAutograd kernel -- linear, matmul, layer_norm, rms_norm,
# scaled_dot_product_attention -- decompose while aot_autograd traces,
# whatever this table says; inference sdpa reaches us as the CPU
# flash-attention op (RblnFusedSdpChoice picks it while tracing), sdpa
# with a gradient as PyTorch's math decomposition.)
_NATIVE_OPS = frozenset({
    # The fused attention kernel (one pass, f32 softmax statistics).
    "_scaled_dot_product_flash_attention_for_cpu",
    # Index arithmetic in one kernel; the decompositions go through cumsum
    # (repeat_interleave.Tensor) or index_put (index_copy).
    "repeat_interleave",
    "index_copy",
    # ATen's arange rounds (end - start) / step in double; the
    # decomposition's iota + mul does not match it for half steps.
    "arange",
    # silu's decomposition is x * sigmoid(x) in the input dtype's opmath:
    # the same arithmetic, kept as one op so eager and graph programs share
    # the converter.
    "silu",
    # One-sided clamps stay ops: their decomposition, clamp.Tensor with a
    # None bound, reaches the IR as clamp(x, t), where min and max cannot be
    # told apart (see _clamp_tensor).
    "clamp_min",
    "clamp_max",
    # ATen computes x + value * t1 / t2 in float and rounds once; the
    # decomposition rounds t1 / t2 to a half dtype first.
    "addcdiv",
    # ATen takes the square root of the double variance before rounding;
    # the decomposition sqrt(var) rounds var first, which overflows float32
    # where std is finite (values above 1.8e19; issue 28's edge cases).
    "std",
    "std_mean",
})


def dynamo_capture_seconds():
    """Seconds since Dynamo started compiling the current frame (bytecode
    tracing up to the backend call), or None if Dynamo does not say."""
    try:
        from torch._dynamo.utils import get_metrics_context

        context = get_metrics_context()
        if context.in_progress() and context._start_time_ns:
            return max(0.0, (time.time_ns() - context._start_time_ns) / 1e9)
    except Exception:  # noqa: BLE001 -- a private API: no number then
        pass
    return None


# (registered operator count, table) of the last decompositions() call.
_decomposition_cache = None


def decompositions():
    """PyTorch's core ATen decompositions minus `_NATIVE_OPS`, plus ours.

    Built once per set of registered operators: reading PyTorch's table
    materializes an entry for every CompositeImplicitAutograd op of every
    namespace (a walk over all registered operators, ~0.2-0.4 s each time,
    which every graph's compile paid -- a generate step's prefill and
    decode graphs twice). A newly registered operator (a custom op loaded
    after a compile) changes the count and rebuilds it."""
    global _decomposition_cache
    registered = len(torch._C._dispatch_get_all_op_names())
    if _decomposition_cache is None or _decomposition_cache[0] != registered:
        _decomposition_cache = (registered, _build_decompositions())
    return dict(_decomposition_cache[1])


def _build_decompositions():
    from torch._decomp import core_aten_decompositions

    table = {
        op: fn for op, fn in core_aten_decompositions().items()
        if _fx_to_ir.ir_op_name(op) not in _NATIVE_OPS
    }
    table[torch.ops.aten._safe_softmax.default] = _safe_softmax
    table[torch.ops.aten.clamp.Tensor] = _clamp_tensor
    table[torch.ops.aten.split.Tensor] = _split
    table[torch.ops.aten.split_with_sizes.default] = _split_with_sizes
    table[torch.ops.aten._cdist_forward.default] = _cdist_forward
    table[torch.ops.aten._pdist_forward.default] = _pdist_forward
    # Ops in dtypes CUDA runs and the compiler lacks (integer histc, ...).
    table.update(_device_only_ops.decompositions())
    table.update(_loss_decompositions.decompositions())
    return table


def _pairwise_p_norm(diff, p):
    """The p-norm over the last dim as ATen's cdist/pdist kernels define it:
    p=0 counts non-zeros, p=inf is the largest |d|, p=1 and p=2 plain."""
    if p == 0:
        return (diff != 0).to(diff.dtype).sum(-1)
    if p == float("inf"):
        return diff.abs().amax(-1)
    if p == 1:
        return diff.abs().sum(-1)
    if p == 2:
        return (diff * diff).sum(-1).sqrt()
    return diff.abs().pow(p).sum(-1).pow(1.0 / p)


def _cdist_forward(x1, x2, p, compute_mode=None):
    """cdist as the difference of every pair (no device kernel of its own):
    the direct form ATen uses for p != 2 and small inputs; for p=2 ATen may
    use the matmul expansion |a|^2 - 2ab + |b|^2, which cancels where the
    direct form does not, so this is at least as accurate."""
    return _pairwise_p_norm(x1.unsqueeze(-2) - x2.unsqueeze(-3), p)


def _pdist_forward(x, p=2.0):
    """pdist: the upper triangle (row-major, i < j) of cdist(x, x). The pair
    indices are constants of the shape, gathered with index_select."""
    n = x.shape[0]
    rows, cols = torch.triu_indices(n, n, 1, device=x.device).unbind(0)
    return _pairwise_p_norm(x.index_select(0, rows) - x.index_select(0, cols), p)


def _python_custom_op_kernels():
    """{custom op: its Python kernel} for the custom ops inlined before
    aot_autograd (`_inline_python_custom_ops`).

    F.linear_cross_entropy's chunked forms are torch.library custom ops
    (torch_nn::_linear_cross_entropy_batch_chunked[_no_reduction]): opaque
    to aot_autograd, with no decomposition. Their kernel is Python over ATen
    ops (matmul, amax, gather, exp/log, sums) in a loop over batch chunks
    whose sizes are known when tracing, so the compiler gets those ops."""
    try:
        from torch.nn.modules import linear_cross_entropy as lce
    except ImportError:  # Not in this torch.
        return {}
    kernels = {}
    for name in ("_linear_cross_entropy_batch_chunked",
                 "_linear_cross_entropy_batch_chunked_no_reduction"):
        op_def = getattr(lce, name, None)
        packet = getattr(getattr(torch.ops, "torch_nn", None), name, None)
        if op_def is not None and packet is not None and hasattr(op_def, "_init_fn"):
            kernels[packet.default] = op_def._init_fn
    return kernels


def inline_python_custom_ops(gm: torch.fx.GraphModule) -> int:
    """Replaces calls of the custom ops `_python_custom_op_kernels` lists by
    calls of their Python kernels, which aot_autograd then traces (and
    functionalizes: the kernels write in place) like the rest of the graph.
    Only calls that no gradient flows through: the kernels compute into
    out= arguments, which autograd refuses, and the op's own backward
    formula stays with the op (a graph that trains through it keeps the op,
    which the compiler lacks: the compile_error fallback applies).
    Returns how many calls it replaced."""
    kernels = _python_custom_op_kernels()
    replaced = 0

    def needs_grad(node):
        vals = [a.meta.get("example_value", a.meta.get("val")) for a in node.all_input_nodes]
        return torch.is_grad_enabled() and any(
            isinstance(v, torch.Tensor) and v.requires_grad for v in vals)

    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in kernels and not needs_grad(node):
            node.target = kernels[node.target]
            replaced += 1
    if replaced:
        gm.recompile()
    return replaced


def _clamp_tensor(x, min=None, max=None):
    """clamp with one tensor bound as clamp_min/clamp_max, whose IR says
    which bound it is (an omitted optional tensor leaves no trace in the IR);
    with both bounds, clamp itself (NotImplemented keeps the op)."""
    if min is None and max is not None:
        return torch.ops.aten.clamp_max.Tensor(x, max)
    if max is None and min is not None:
        return torch.ops.aten.clamp_min.Tensor(x, min)
    return NotImplemented


def _split_with_sizes(x, split_sizes, dim=0):
    """split as one `slice` per piece: single-output ops the compiler has."""
    pieces, start = [], 0
    for size in split_sizes:
        pieces.append(torch.ops.aten.slice.Tensor(x, dim, start, start + size))
        start += size
    return pieces


def _split(x, split_size, dim=0):
    total = x.shape[dim]
    sizes = [split_size] * (total // split_size)
    if total % split_size:
        sizes.append(total % split_size)
    return _split_with_sizes(x, sizes or [0], dim)


def _safe_softmax(x, dim, dtype=None):
    """SDPA's softmax: rows that are all -inf give 0, not NaN (torch's own
    decomposition needs `all`). Written out -- the row max, exp(x - max), its
    sum, the quotient -- so the max that finds the all -inf rows is the one
    the softmax subtracts: one pass over the attention scores, not two. Half
    inputs are computed in float32 and rounded once, as softmax is."""
    target = dtype if dtype is not None else x.dtype
    xc = x.to(target)
    if x.shape[dim] == 0:
        return torch.softmax(xc, dim)
    if target in (torch.float16, torch.bfloat16):
        xc = xc.to(torch.float32)
    row_max = torch.amax(xc, dim, keepdim=True)
    e = torch.exp(xc - row_max)
    out = e / e.sum(dim, keepdim=True)
    masked_rows = row_max == float("-inf")
    out = torch.where(masked_rows, torch.zeros((), dtype=out.dtype, device=out.device), out)
    return out.to(target)
