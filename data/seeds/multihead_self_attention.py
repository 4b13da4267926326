"""Multi-head self-attention with learned input and output projections (nn.MultiheadAttention).

category: attention
level: 2
"""
import torch
import torch.nn as nn

BATCH = 16
SEQ_LEN = 512
EMBED_DIM = 512
NUM_HEADS = 8


class Model(nn.Module):
    def __init__(self, embed_dim: int, num_heads: int):
        super().__init__()
        self.attention = nn.MultiheadAttention(embed_dim, num_heads, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.attention(x, x, x, need_weights=False)
        return out


def get_inputs():
    return [torch.randn(BATCH, SEQ_LEN, EMBED_DIM) * 2.0]


def get_init_inputs():
    return [EMBED_DIM, NUM_HEADS]
