"""Blend two tensors column-wise with a learned sigmoid gate (torch.lerp).

category: elementwise
level: 1
"""
import torch
import torch.nn as nn

ROWS = 16384
COLS = 8192


class Model(nn.Module):
    def __init__(self, cols: int):
        super().__init__()
        self.gate = nn.Parameter(torch.randn(cols))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.lerp(x, y, torch.sigmoid(self.gate))


def get_inputs():
    return [torch.randn(ROWS, COLS), torch.randn(ROWS, COLS)]


def get_init_inputs():
    return [COLS]
