"""Signatures of collective calls, exchanged before the payload so ranks
that disagree (shape, dtype, op, root, which collective) get a clear error
instead of gloo's abort."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist


def op_name(op) -> str:
    for name in ("SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "PREMUL_SUM"):
        if op == getattr(dist.ReduceOp, name):
            return name
    return str(op)


CHECK_AGREEMENT = os.environ.get("TORCH_RBLN_CCL_CHECK", "1") != "0"
_COLLECTIVES = [
    "all_reduce", "all_reduce_coalesced", "broadcast", "all_gather", "all_gather_into_tensor",
    "reduce_scatter", "reduce_scatter_tensor", "barrier", "send", "reduce", "gather", "scatter",
    "all_to_all_single",
]
_OPS = ["SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "PREMUL_SUM"]
DTYPES = [
    torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32,
    torch.int16, torch.int8, torch.uint8, torch.bool, torch.complex64, torch.complex128,
]
_MAX_DIMS = 8
# collective, op, dtype, root, tensor count, numel, ndim, dims...
SIG_LEN = 7 + _MAX_DIMS


def signature(collective, tensor, op, root, count) -> torch.Tensor:
    sig = torch.full((SIG_LEN,), -1, dtype=torch.int64)
    sig[0] = _COLLECTIVES.index(collective)
    sig[1] = _OPS.index(op_name(op)) if op is not None else -1
    sig[3] = root
    sig[4] = count
    if tensor is not None:
        sig[2] = DTYPES.index(tensor.dtype) if tensor.dtype in DTYPES else len(DTYPES)
        sig[5] = tensor.numel()
        sig[6] = tensor.dim()
        for i, size in enumerate(tensor.shape[:_MAX_DIMS]):
            sig[7 + i] = size
    return sig


def describe(row: torch.Tensor) -> str:
    """E.g. "all_reduce(float32[4, 6], SUM)" for a _signature row."""
    r = row.tolist()
    name = _COLLECTIVES[r[0]] if 0 <= r[0] < len(_COLLECTIVES) else f"collective #{r[0]}"
    return f"{name}({describe_args(row)})"


def describe_args(row: torch.Tensor) -> str:
    r = row.tolist()
    args = []
    if r[6] >= 0:
        dtype = str(DTYPES[r[2]]).replace("torch.", "") if r[2] < len(DTYPES) else "other dtype"
        dims = r[7 : 7 + min(r[6], _MAX_DIMS)]
        args.append(f"{dtype}{dims}" + (" ..." if r[6] > _MAX_DIMS else ""))
    if r[4] != 1:
        args.append(f"{r[4]} tensors")
    if r[1] >= 0:
        args.append(_OPS[r[1]])
    if r[3] >= 0:
        args.append(f"root {r[3]}")
    return ", ".join(args)
