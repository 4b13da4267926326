"""Scaled sum of two vectors: 2*x + y, at a size where a GPU call takes tens of µs (16M elements;
4096 where no GPU is present: the CPU suite runs the Triton interpreter).

category: elementwise
level: 1
"""
import torch
import torch.nn as nn

N = (1 << 24) if torch.cuda.is_available() else 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        return 2.0 * x + y


def get_inputs():
    return [torch.randn(N), torch.randn(N)]


def get_init_inputs():
    return []
