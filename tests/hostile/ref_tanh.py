"""Hyperbolic tangent, elementwise.

category: activation
level: 1
"""
import torch
import torch.nn as nn

N = 8192


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.tanh(x)


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []
