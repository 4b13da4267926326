"""A statement whose result is never used, and a clamp that never clips.

expect: no_dead_ops
"""
import torch
import torch.nn as nn

N = 64


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(N, N)

    def forward(self, x):
        unused = torch.exp(x)
        y = self.linear(x)
        y = torch.clamp(y, min=-1e6)
        return torch.tanh(y)


def get_inputs():
    return [torch.randn(32, N)]


def get_init_inputs():
    return []
