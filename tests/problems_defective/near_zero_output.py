"""Outputs so small that an all-zeros answer passes the tolerance.

expect: not_near_zero
"""
import torch
import torch.nn as nn

N = 64


class Model(nn.Module):
    def forward(self, x):
        return torch.tanh(x) * 1e-7


def get_inputs():
    return [torch.randn(N, N)]


def get_init_inputs():
    return []
