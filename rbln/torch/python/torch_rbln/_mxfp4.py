"""rbln::grouped_mm_mxfp4: torch._grouped_mm's 2-D x 3-D form on MXFP4
weights (OCP microscaling FP4, the format of gpt-oss's experts).

    out[rows of group g] = a[rows of group g] @ W[g].T

W[g] [N, K] given as `blocks` [G, N, K/2] uint8 (two e2m1 values a byte,
low nibble first) and `scales` [G, N, K/32] uint8 (e8m0: 2^(s - 127) per
32 values of a row); groups end at `offs` [G] as in _grouped_mm; rows in no
group are zero. In a compiled graph it is the compiler's op (frontend
grouped_mm_mxfp4, kernels/mxfp4_grouped_gemm.h: the weights read packed
and dequantized on the way, a fused GEMV for groups of few rows); called
eagerly it runs the torch ops below on the tensors' device. An e8m0 scale
of 0 (2^-127) flushes its values to zero, as the kernel does.
"""

import torch

# e2m1 values by nibble.
FP4_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
              -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)


def dequantize(blocks: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """[..., N, K] float32 from `blocks` [..., N, K/2] and `scales` [..., N, K/32]."""
    *lead, n, half = blocks.shape
    lut = torch.tensor(FP4_VALUES, dtype=torch.float32, device=blocks.device)
    values = torch.stack([lut[(blocks & 0x0F).long()], lut[(blocks >> 4).long()]], dim=-1)
    scale = (scales.to(torch.int32) << 23).view(torch.float32).unsqueeze(-1)
    return (values.view(*lead, n, half * 2 // 32, 32) * scale).view(*lead, n, half * 2)


@torch.library.custom_op("rbln::grouped_mm_mxfp4", mutates_args=())
def grouped_mm_mxfp4(a: torch.Tensor, blocks: torch.Tensor, scales: torch.Tensor,
                     offs: torch.Tensor) -> torch.Tensor:
    w = dequantize(blocks, scales)
    out = torch.zeros(a.shape[0], blocks.shape[1], dtype=torch.float32, device=a.device)
    start = 0
    for g, end in enumerate(offs.tolist()):
        if end > start:
            out[start:end] = a[start:end].float() @ w[g].T
        start = end  # the next group starts where this one was given to end
    return out.to(a.dtype)


@grouped_mm_mxfp4.register_fake
def _(a, blocks, scales, offs):
    torch._check(a.dim() == 2 and blocks.dim() == 3 and scales.dim() == 3 and offs.dim() == 1,
                 lambda: "rbln::grouped_mm_mxfp4: expected a [M, K], blocks [G, N, K/2], "
                         "scales [G, N, K/32] and offs [G]")
    torch._check(blocks.dtype == torch.uint8 and scales.dtype == torch.uint8,
                 lambda: "rbln::grouped_mm_mxfp4: blocks and scales are uint8")
    torch._check(a.shape[1] == 2 * blocks.shape[2] == 32 * scales.shape[2],
                 lambda: f"rbln::grouped_mm_mxfp4: K = {a.shape[1]} does not match blocks "
                         f"{tuple(blocks.shape)} and scales {tuple(scales.shape)}")
    return a.new_empty(a.shape[0], blocks.shape[1])
