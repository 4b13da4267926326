"""Per-head input projection written as an einsum: (B, S, D) x (H, D, E) -> (B, H, S, E).

category: matmul
level: 1
"""
import math

import torch
import torch.nn as nn

BATCH = 16
SEQ_LEN = 1024
MODEL_DIM = 1024
NUM_HEADS = 16
HEAD_DIM = 64


class Model(nn.Module):
    def __init__(self, model_dim: int, num_heads: int, head_dim: int):
        super().__init__()
        bound = 1.0 / math.sqrt(model_dim)
        weight = torch.empty(num_heads, model_dim, head_dim).uniform_(-bound, bound)
        self.weight = nn.Parameter(weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.einsum("bsd,hde->bhse", x, self.weight)


def get_inputs():
    return [torch.randn(BATCH, SEQ_LEN, MODEL_DIM)]


def get_init_inputs():
    return [MODEL_DIM, NUM_HEADS, HEAD_DIM]
