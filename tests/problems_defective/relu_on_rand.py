"""ReLU applied to inputs in [0, 1): the nonlinearity never acts (identity).

expect: not_affine, no_dead_ops
"""
import torch
import torch.nn as nn

N = 64


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2.0 + 1.0


def get_inputs():
    return [torch.rand(8, N, N)]


def get_init_inputs():
    return []
