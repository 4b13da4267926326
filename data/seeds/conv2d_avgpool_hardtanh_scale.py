"""3x3 convolution, 2x2 average pooling, hardtanh to [-0.3, 0.3], learned per-channel scale.

category: fused
level: 2
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 32
IN_CHANNELS = 32
OUT_CHANNELS = 64
HEIGHT = 128
WIDTH = 128


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1)
        self.scale = nn.Parameter(torch.rand(out_channels, 1, 1) * 2.0 + 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.avg_pool2d(self.conv(x), 2)
        return F.hardtanh(y, -0.3, 0.3) * self.scale


def get_inputs():
    return [torch.randn(BATCH, IN_CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [IN_CHANNELS, OUT_CHANNELS]
