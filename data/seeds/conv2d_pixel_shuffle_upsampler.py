"""Sub-pixel upsampler: 3x3 convolution to 4x channels, pixel shuffle by 2, PReLU-like leaky ReLU.

category: fused
level: 2
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 16
CHANNELS = 64
HEIGHT = 96
WIDTH = 96
UPSCALE = 2


class Model(nn.Module):
    def __init__(self, channels: int, upscale: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels * upscale * upscale, 3, padding=1)
        self.upscale = upscale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.leaky_relu(F.pixel_shuffle(self.conv(x), self.upscale), 0.2)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [CHANNELS, UPSCALE]
