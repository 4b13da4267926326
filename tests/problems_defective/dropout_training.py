"""Dropout left in training mode: the output depends on the RNG state.

expect: not_stochastic
"""
import torch
import torch.nn as nn

N = 64


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(N, N)
        self.drop = nn.Dropout(p=0.5)

    def forward(self, x):
        return self.drop(torch.tanh(self.linear(x)))


def get_inputs():
    return [torch.randn(32, N)]


def get_init_inputs():
    return []
