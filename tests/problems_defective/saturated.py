"""Logits pushed far into saturation: the output barely depends on the input.

expect: input_sensitive
"""
import torch
import torch.nn as nn

N = 64


class Model(nn.Module):
    def forward(self, x):
        return torch.sigmoid(x + 40.0) * torch.arange(N, dtype=x.dtype, device=x.device)


def get_inputs():
    return [torch.randn(N, N)]


def get_init_inputs():
    return []
