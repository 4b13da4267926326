"""Batched matmul with scaled accumulation into a bias: 0.5 * C + A @ B / sqrt(K).

category: matmul
level: 1
"""
import math

import torch
import torch.nn as nn

BATCH = 64
M = 512
N = 512
K = 1024


class Model(nn.Module):
    def __init__(self, k: int):
        super().__init__()
        self.alpha = 1.0 / math.sqrt(k)

    def forward(self, c: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(c, a, b, beta=0.5, alpha=self.alpha)


def get_inputs():
    return [torch.randn(BATCH, M, N), torch.randn(BATCH, M, K), torch.randn(BATCH, K, N)]


def get_init_inputs():
    return [K]
