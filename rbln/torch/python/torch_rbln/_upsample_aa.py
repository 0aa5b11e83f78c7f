"""Antialiased bilinear resizing (`aten._upsample_bilinear2d_aa`, what
`F.interpolate(mode="bilinear", antialias=True)` calls) as two matrix
products, for compiled graphs and rbln's eager float16/bfloat16 calls
(issue 30: CUDA runs the half types, the CPU kernel rejects them).

The op is separable: out = W_h @ x @ W_w^T, where each row of W holds one
output pixel's normalised triangle-filter weights over the input pixels.
The weights depend on the sizes, scales and align_corners only; they are
computed in float32 as ATen's kernels compute them (aten/src/ATen/native/cpu/
UpSampleKernel.cpp `_compute_weights_aa`, the same arithmetic as
UpSampleBilinear2d.cu's), from aranges, so a graph folds them.
"""

import torch


def _scale(in_size, out_size, align_corners, scale):
    """ATen's area_pixel_compute_scale."""
    if align_corners:
        return (in_size - 1) / (out_size - 1) if out_size > 1 else 0.0
    if scale is not None and scale > 0:
        return 1.0 / scale
    return in_size / out_size


def weights(in_size, out_size, align_corners, scale, device):
    """(out_size, in_size) float32 triangle-filter weights (bilinear,
    antialiased), as ATen computes them in float (`_compute_weights_aa`):
    output pixel i reads input pixels [xmin, xmax) around its center, each
    weighted by the triangle filter, normalised to sum 1. Built from aranges
    (a graph needs no constant tensor). A dimension whose size does not
    change is copied, whatever the scale (the CPU kernel skips it:
    `_separable_upsample_generic_Nd_kernel_impl`)."""
    if in_size == out_size:
        return torch.eye(in_size, dtype=torch.float32, device=device)
    s = _scale(in_size, out_size, align_corners, scale)
    support = s if s >= 1.0 else 1.0  # interp_size 2, widened by the scale
    invscale = 1.0 / s if s >= 1.0 else 1.0
    center = (torch.arange(out_size, dtype=torch.float32, device=device) + 0.5) * s
    center = center.unsqueeze(1)
    # static_cast<int64_t>: truncation toward zero.
    xmin = torch.trunc(center - support + 0.5).clamp(min=0)
    xmax = torch.trunc(center + support + 0.5).clamp(max=in_size)
    j = torch.arange(in_size, dtype=torch.float32, device=device).unsqueeze(0)
    w = (1.0 - ((j - center + 0.5) * invscale).abs()).clamp(min=0)
    w = torch.where((j >= xmin) & (j < xmax), w, 0.0)
    total = w.sum(1, keepdim=True)
    return torch.where(total != 0, w / torch.where(total != 0, total, 1.0), 0.0)


def upsample_bilinear2d_aa(x, output_size, align_corners, scales_h=None, scales_w=None):
    """The op on a float32 (N, C, H, W) tensor."""
    out_h, out_w = output_size
    in_h, in_w = x.shape[-2:]
    w_h = weights(in_h, out_h, align_corners, scales_h, x.device)
    w_w = weights(in_w, out_w, align_corners, scales_w, x.device)
    return torch.matmul(torch.matmul(w_h, x), w_w.t())


def decomposition(x, output_size, align_corners, scales_h=None, scales_w=None):
    """Compiled graphs: float32 as it is, the half types in float32 (CUDA's
    opmath) rounded once."""
    if not x.is_floating_point() or x.dtype == torch.float64:
        return NotImplemented
    return upsample_bilinear2d_aa(x.float(), output_size, align_corners, scales_h,
                                  scales_w).to(x.dtype)
