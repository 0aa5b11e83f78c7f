"""Loss decompositions PyTorch gets wrong, corrected, for the decomposition
table of compiled graphs.

`multilabel_margin_loss_forward`: torch._decomp's version (torch 2.13)
gathers the target scores u[n, k] for every position k of the target row,
including the positions after the first -1 (gathered as class 0), and then
masks only the classes j that are targets, not the positions k that are
not: a row such as [1, -1, 0, 0] adds the hinge terms of class 0 three more
times (the CPU's 2.72 becomes 3.67). The CPU and CUDA kernels
(MultiLabelMarginCriterion) sum over the positions before the first -1
only. Here those positions are masked too; the rest is the same.
"""

import torch

_MEAN, _SUM = 1, 2  # at::Reduction


def multilabel_margin_loss_forward(input, target, reduction):
    shape = input.shape
    torch._check(input.dim() <= 2 and input.numel() > 0 and target.shape == shape,
                 lambda: f"multilabel_margin_loss: input {tuple(shape)} and target "
                         f"{tuple(target.shape)} must be one non-empty vector or matrix each")
    x = torch.atleast_2d(input)
    t = torch.atleast_2d(target)
    dim = x.shape[1]
    idx = torch.arange(dim, device=t.device)
    end = torch.amin(torch.where(t == -1, idx, dim), dim=-1, keepdim=True)
    active = idx < end  # [n, k]: target position k is before the first -1
    u = torch.gather(x, -1, torch.where(active, t, 0))  # [n, k]
    is_target = torch.any(idx == torch.where(active, t, -1).unsqueeze(-1), dim=1)  # [n, j]
    # z[n, k, j]: the hinge of target position k against class j.
    z = (1.0 - u.unsqueeze(-1) + x.unsqueeze(1)).clamp_min(0) / dim
    z = torch.where(active.unsqueeze(-1) & ~is_target.unsqueeze(1), z, 0)
    loss = z.sum(dim=(1, 2))
    if reduction == _MEAN:
        loss = loss.mean()
    elif reduction == _SUM:
        loss = loss.sum()
    elif input.dim() < 2:
        loss = loss.reshape(())
    return loss, is_target.to(input.dtype).reshape(target.shape)


def decompositions():
    return {torch.ops.aten.multilabel_margin_loss_forward.default: multilabel_margin_loss_forward}
