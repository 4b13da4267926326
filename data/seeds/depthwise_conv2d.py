"""Depthwise 2-D convolution (one 5x5 filter per channel, groups = channels).

category: convolution
level: 1
"""
import torch
import torch.nn as nn

BATCH = 64
CHANNELS = 128
HEIGHT = 128
WIDTH = 128
KERNEL_SIZE = 5


class Model(nn.Module):
    def __init__(self, channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, kernel_size, padding=kernel_size // 2,
                              groups=channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [CHANNELS, KERNEL_SIZE]
