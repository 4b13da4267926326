"""A bias-free linear layer (matmul with a learned weight).

category: matmul
level: 1
"""
import torch
import torch.nn as nn

M = 32
K = 64
N = 32


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_features, in_features) * 0.1)

    def forward(self, x):
        return x @ self.weight.t()


def get_inputs():
    return [torch.randn(M, K)]


def get_init_inputs():
    return [K, N]
