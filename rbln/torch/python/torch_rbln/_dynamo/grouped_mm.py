"""Grouped GEMM (torch._grouped_mm, transformers::grouped_mm_fallback) as
ATen ops the compiler has, for the decomposition table of compiled graphs.

An MoE layer (transformers.integrations.moe.grouped_mm_experts_forward)
sorts its token->expert pairs, takes the offsets of each expert's rows as a
cumsum of a histc (data-dependent values, static shapes) and multiplies the
rows of expert e with that expert's weight. bfloat16 weights go through
torch._grouped_mm; other dtypes under torch.compile through transformers'
opaque custom op grouped_mm_fallback, whose signature (input [S, K], weight
[E, K, N], offs [E]) and result are those of _grouped_mm's 2-D x 3-D form.

Both become, with g(m) = the number of offsets <= m (the group of row m):
    out[m, n] = sum_k A[m, k] * B[g(m), k, n]   (0 where g(m) == E)
rows past the last offset are zero, as PyTorch defines them. With at most
as many rows as groups (decode) each row's weight is gathered (index_select)
and the rows multiplied as a batch of 1 x K by K x N products; with more
rows, every group's weight multiplies all rows in one batch GEMM and each
row keeps its group's product (not M gathered K x N weights). Both in
float32 for half inputs (opmath: one rounding of the float32 sum), so the
whole layer stays one device program with no host op and no shape that
depends on the routing.
"""

import torch

_HALF = (torch.float16, torch.bfloat16)


def grouped_mm(a, b, offs=None, bias=None, out_dtype=None):
    """aten._grouped_mm's 2-D x 3-D form with offsets (the MoE form); other
    forms return NotImplemented (decomposition-table protocol: the op stays)."""
    if offs is None or bias is not None or a.dim() != 2 or b.dim() != 3:
        return NotImplemented
    torch._check(a.shape[1] == b.shape[1], lambda: (
        f"grouped_mm: contraction dims differ: input {tuple(a.shape)}, "
        f"weight {tuple(b.shape)}"))
    torch._check(offs.dim() == 1 and offs.shape[0] == b.shape[0], lambda: (
        f"grouped_mm: offs must have one entry per group ({b.shape[0]}), "
        f"got shape {tuple(offs.shape)}"))
    groups = b.shape[0]
    rows = torch.arange(a.shape[0], device=a.device, dtype=torch.int64)
    group = (rows.unsqueeze(1) >= offs.to(torch.int64).unsqueeze(0)).sum(1)
    compute = torch.float32 if a.dtype in _HALF else a.dtype
    if a.shape[0] <= groups:
        # Few rows (decode): each row reads its own expert's weight, at most
        # as many weights as there are groups.
        weight = b.index_select(0, group.clamp(max=groups - 1))  # [M, K, N]
        out = torch.bmm(a.to(compute).unsqueeze(1), weight.to(compute)).squeeze(1)
        out = torch.where((group < groups).unsqueeze(1), out,
                          torch.zeros((), dtype=compute, device=a.device))
    else:
        # More rows than groups (prefill): gathering a weight per row would
        # read (and hold) M x K x N; instead every weight is read once, all
        # rows multiplied by it in one batch GEMM, and each row keeps its
        # group's product ([E, M, N]; rows past the last offset keep none).
        # Until the compiler has a grouped GEMM, this computes E times the
        # routed products.
        products = torch.bmm(a.to(compute).unsqueeze(0).expand(groups, -1, -1),
                             b.to(compute))  # [E, M, N]
        ids = torch.arange(groups, device=a.device, dtype=torch.int64)
        mine = (ids.unsqueeze(1) == group.unsqueeze(0)).to(compute)  # [E, M]
        out = (products * mine.unsqueeze(2)).sum(0)
    return out.to(out_dtype if out_dtype is not None else a.dtype)


def transformers_grouped_mm_fallback(input, weight, offs):
    """transformers::grouped_mm_fallback (same result as grouped_mm)."""
    return grouped_mm(input, weight, offs)


def decompositions():
    """{op: decomposition} for the grouped GEMM ops; transformers' op only
    once transformers registered it (importing its MoE integration)."""
    table = {torch.ops.aten._grouped_mm.default: grouped_mm}
    try:
        fallback = torch.ops.transformers.grouped_mm_fallback.default
    except (AttributeError, RuntimeError):  # transformers' op not registered.
        return table
    table[fallback] = transformers_grouped_mm_fallback
    return table
