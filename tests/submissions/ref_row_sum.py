"""Sum of each row of a matrix.

category: reduction
level: 1
"""
import torch
import torch.nn as nn

ROWS = 64
COLS = 96


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x.sum(dim=1)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
