"""Stride-2 transposed 3-D convolution, softmax across channels, learned per-channel scale.

category: fused
level: 2
"""
import torch
import torch.nn as nn

BATCH = 8
IN_CHANNELS = 32
OUT_CHANNELS = 16
DEPTH = 24
HEIGHT = 48
WIDTH = 48


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.deconv = nn.ConvTranspose3d(in_channels, out_channels, 3, stride=2, padding=1,
                                         output_padding=1)
        self.scale = nn.Parameter(torch.rand(out_channels, 1, 1, 1) * 2.0 + 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.deconv(x), dim=1) * self.scale


def get_inputs():
    return [torch.randn(BATCH, IN_CHANNELS, DEPTH, HEIGHT, WIDTH) * 3.0]


def get_init_inputs():
    return [IN_CHANNELS, OUT_CHANNELS]
