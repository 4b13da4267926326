"""Gated linear unit: first half of the last dimension times the sigmoid of the second half.

category: activation
level: 1
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

ROWS = 32768
COLS = 8192


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.glu(x, dim=-1)


def get_inputs():
    return [torch.randn(ROWS, COLS) * 2.0]


def get_init_inputs():
    return []
