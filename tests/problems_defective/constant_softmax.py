"""Softmax over a dimension of size one: every output is exactly 1.

expect: not_constant, input_sensitive
"""
import torch
import torch.nn as nn

N = 64


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x.unsqueeze(-1), dim=-1) * 3.0


def get_inputs():
    return [torch.randn(N, N)]


def get_init_inputs():
    return []
