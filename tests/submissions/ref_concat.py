"""Concatenate two matrices along their columns.

category: other
level: 1
"""
import torch
import torch.nn as nn

ROWS = 32
LEFT = 40
RIGHT = 24


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        return torch.cat([x, y], dim=1)


def get_inputs():
    return [torch.randn(ROWS, LEFT), torch.randn(ROWS, RIGHT)]


def get_init_inputs():
    return []
