"""Grouped 2-D convolution with 8 groups, 3x3 kernel, same padding.

category: convolution
level: 1
"""
import torch
import torch.nn as nn

BATCH = 32
IN_CHANNELS = 128
OUT_CHANNELS = 256
GROUPS = 8
HEIGHT = 128
WIDTH = 128


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, groups: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1, groups=groups)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs():
    return [torch.randn(BATCH, IN_CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [IN_CHANNELS, OUT_CHANNELS, GROUPS]
