"""A layer whose contribution is multiplied away: the output ignores the weights.

expect: weight_sensitive
"""
import torch
import torch.nn as nn

N = 64


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(N, N)

    def forward(self, x):
        return torch.tanh(x) + 0.0 * self.linear(x)


def get_inputs():
    return [torch.randn(32, N)]


def get_init_inputs():
    return []
