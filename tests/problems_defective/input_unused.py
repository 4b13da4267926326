"""The second input has no effect on the output.

expect: input_sensitive
"""
import torch
import torch.nn as nn

N = 64


class Model(nn.Module):
    def forward(self, x, y):
        return torch.tanh(x) + torch.zeros_like(y)


def get_inputs():
    return [torch.randn(N, N), torch.randn(N, N)]


def get_init_inputs():
    return []
