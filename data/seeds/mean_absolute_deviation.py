"""Mean absolute deviation from the row mean.

category: reduction
level: 1
"""
import torch
import torch.nn as nn

ROWS = 16384
COLS = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        centered = x - x.mean(dim=-1, keepdim=True)
        return centered.abs().mean(dim=-1)


def get_inputs():
    return [torch.randn(ROWS, COLS) * (torch.rand(ROWS, 1) * 2.0 + 0.1) + torch.randn(ROWS, 1)]


def get_init_inputs():
    return []
