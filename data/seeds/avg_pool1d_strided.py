"""1-D average pooling with window 8 and stride 4 over long signals.

category: pooling
level: 1
"""
import torch
import torch.nn as nn

BATCH = 64
CHANNELS = 128
LENGTH = 32768
KERNEL_SIZE = 8
STRIDE = 4


class Model(nn.Module):
    def __init__(self, kernel_size: int, stride: int):
        super().__init__()
        self.pool = nn.AvgPool1d(kernel_size, stride=stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, LENGTH)]


def get_init_inputs():
    return [KERNEL_SIZE, STRIDE]
