"""Dilated 1-D max pooling (window 4, dilation 3, stride 2).

category: pooling
level: 1
"""
import torch
import torch.nn as nn

BATCH = 64
CHANNELS = 64
LENGTH = 65536


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.MaxPool1d(kernel_size=4, stride=2, dilation=3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, LENGTH)]


def get_init_inputs():
    return []
