"""Sort every row in ascending order (values only).

category: other
level: 1
"""
import torch
import torch.nn as nn

ROWS = 16384
COLS = 2048


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sort(x, dim=-1).values


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
