"""Sum over the middle dimension of a 3-D tensor.

category: reduction
level: 1
"""
import torch
import torch.nn as nn

BATCH = 256
REDUCE = 2048
COLS = 512


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=1)


def get_inputs():
    return [torch.randn(BATCH, REDUCE, COLS)]


def get_init_inputs():
    return []
