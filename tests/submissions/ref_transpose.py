"""Transpose a matrix into a new contiguous buffer.

category: other
level: 1
"""
import torch
import torch.nn as nn

ROWS = 48
COLS = 80


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x.t().contiguous()


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
