"""Scaled sum of two vectors: 2*x + y.

category: elementwise
level: 1
"""
import torch
import torch.nn as nn

N = 16384


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        return 2.0 * x + y


def get_inputs():
    return [torch.randn(N), torch.randn(N)]


def get_init_inputs():
    return []
