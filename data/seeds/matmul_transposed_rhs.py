"""Matrix product A @ B^T where both operands are stored row-major with the shared dimension last.

category: matmul
level: 1
"""
import torch
import torch.nn as nn

M = 4096
N = 4096
K = 2048


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b.transpose(0, 1))


def get_inputs():
    return [torch.randn(M, K), torch.randn(N, K)]


def get_init_inputs():
    return []
