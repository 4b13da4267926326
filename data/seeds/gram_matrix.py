"""Gram matrix X^T X of a tall matrix whose columns have different scales.

category: matmul
level: 1
"""
import torch
import torch.nn as nn

ROWS = 8192
COLS = 2048


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.matmul(x.transpose(0, 1), x)


def get_inputs():
    return [torch.randn(ROWS, COLS) * (torch.rand(1, COLS) + 0.5)]


def get_init_inputs():
    return []
