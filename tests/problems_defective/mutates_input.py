"""Forward writes into its input.

expect: inputs_unchanged
"""
import torch
import torch.nn as nn

N = 64


class Model(nn.Module):
    def forward(self, x):
        x.mul_(2.0)
        return torch.sigmoid(x)


def get_inputs():
    return [torch.randn(N, N)]


def get_init_inputs():
    return []
