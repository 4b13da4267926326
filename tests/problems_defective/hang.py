"""Forward never returns.

expect: runs
"""
import torch
import torch.nn as nn

N = 64


class Model(nn.Module):
    def forward(self, x):
        while True:
            x = x + 0
        return x


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []
