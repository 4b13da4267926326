"""Transposed 3-D convolution doubling each spatial size (kernel 3, stride 2, output padding 1).

category: convolution
level: 1
"""
import torch
import torch.nn as nn

BATCH = 8
IN_CHANNELS = 32
OUT_CHANNELS = 16
DEPTH = 32
HEIGHT = 48
WIDTH = 48


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.deconv = nn.ConvTranspose3d(in_channels, out_channels, 3, stride=2, padding=1,
                                         output_padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.deconv(x)


def get_inputs():
    return [torch.randn(BATCH, IN_CHANNELS, DEPTH, HEIGHT, WIDTH)]


def get_init_inputs():
    return [IN_CHANNELS, OUT_CHANNELS]
