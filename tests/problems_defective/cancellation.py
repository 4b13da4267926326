"""Catastrophic cancellation in float32: no tolerance makes it gradable.

expect: tolerance
"""
import torch
import torch.nn as nn

N = 64


class Model(nn.Module):
    def forward(self, x):
        big = x * 10.0 + 3e7
        return (big - 3e7) * torch.sigmoid(x)


def get_inputs():
    return [torch.randn(N, N)]


def get_init_inputs():
    return []
