"""Forward multiplies matrices of incompatible shapes.

expect: runs
"""
import torch
import torch.nn as nn

N = 64


class Model(nn.Module):
    def forward(self, x, y):
        return x @ y


def get_inputs():
    return [torch.randn(N, 3), torch.randn(N, 5)]


def get_init_inputs():
    return []
