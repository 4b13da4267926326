"""Unbiased variance of each column of a tall matrix.

category: reduction
level: 1
"""
import torch
import torch.nn as nn

ROWS = 131072
COLS = 2048


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.var(x, dim=0, unbiased=True)


def get_inputs():
    # each column has its own random spread and offset
    return [torch.randn(ROWS, COLS) * (torch.rand(1, COLS) * 3.0) + torch.randn(1, COLS)]


def get_init_inputs():
    return []
