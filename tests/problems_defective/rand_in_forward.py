"""Noise drawn inside forward from the global RNG.

expect: not_stochastic
"""
import torch
import torch.nn as nn

N = 64


class Model(nn.Module):
    def forward(self, x):
        return torch.sigmoid(x) + 0.1 * torch.rand_like(x)


def get_inputs():
    return [torch.randn(N, N)]


def get_init_inputs():
    return []
