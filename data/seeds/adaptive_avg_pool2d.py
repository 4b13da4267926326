"""Adaptive 2-D average pooling of feature maps to a 7x7 grid.

category: pooling
level: 1
"""
import torch
import torch.nn as nn

BATCH = 256
CHANNELS = 512
HEIGHT = 56
WIDTH = 56
OUTPUT_SIZE = 7


class Model(nn.Module):
    def __init__(self, output_size: int):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d((output_size, output_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [OUTPUT_SIZE]
