"""A GPT-2-style transformer block: token + position embeddings, pre-layer-norm
causal self-attention and a GELU MLP, each with a residual connection.

Used by the torch.compile tests, `scripts/demo` and the compile benchmark;
written here so that nothing is downloaded (random weights).
"""

import torch
import torch.nn.functional as F
from torch import nn


class GPT2Block(nn.Module):
    def __init__(self, vocab=256, max_seq=128, dim=128, heads=2, mlp_ratio=4):
        super().__init__()
        if dim % heads:
            raise ValueError(f"dim {dim} is not a multiple of heads {heads}")
        self.heads = heads
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(max_seq, dim)
        self.ln_1 = nn.LayerNorm(dim)
        self.c_attn = nn.Linear(dim, 3 * dim)
        self.c_proj = nn.Linear(dim, dim)
        self.ln_2 = nn.LayerNorm(dim)
        self.c_fc = nn.Linear(dim, mlp_ratio * dim)
        self.c_fc_proj = nn.Linear(mlp_ratio * dim, dim)

    def forward(self, idx):
        batch, seq = idx.shape
        pos = torch.arange(seq, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        q, k, v = self.c_attn(self.ln_1(x)).split(x.shape[-1], dim=-1)

        def heads(t):
            return t.view(batch, seq, self.heads, -1).transpose(1, 2)

        a = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)
        x = x + self.c_proj(a.transpose(1, 2).reshape(batch, seq, -1))
        return x + self.c_fc_proj(F.gelu(self.c_fc(self.ln_2(x))))


def make_block(dtype=torch.float16, seed=0, **kwargs) -> GPT2Block:
    """A block with random weights (deterministic for `seed`) on the CPU."""
    gen = torch.Generator().manual_seed(seed)
    block = GPT2Block(**kwargs)
    with torch.no_grad():
        for p in block.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
        for name, p in block.named_parameters():
            if name.startswith(("ln_1", "ln_2")) and name.endswith("weight"):
                p.add_(1.0)
    return block.to(dtype).eval()
