"""A float32 matrix product whose outputs are small (RMS about 0.03): the absolute tolerance
floor alone would admit half-precision operands.

category: matmul
level: 1
"""
import torch
import torch.nn as nn

M = 64
K = 256
N = 64


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return a @ b


def get_inputs():
    return [torch.randn(M, K) * 0.05, torch.randn(K, N) * 0.04]


def get_init_inputs():
    return []
