"""Pointwise (1x1) 2-D convolution mixing channels at every pixel.

category: convolution
level: 1
"""
import torch
import torch.nn as nn

BATCH = 16
IN_CHANNELS = 256
OUT_CHANNELS = 512
HEIGHT = 64
WIDTH = 64


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs():
    return [torch.randn(BATCH, IN_CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [IN_CHANNELS, OUT_CHANNELS]
