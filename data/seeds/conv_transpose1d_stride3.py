"""Transposed 1-D convolution with stride 3 and kernel 5 (upsampling a sequence about threefold).

category: convolution
level: 1
"""
import torch
import torch.nn as nn

BATCH = 64
IN_CHANNELS = 128
OUT_CHANNELS = 64
LENGTH = 4096
KERNEL_SIZE = 5
STRIDE = 3


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int):
        super().__init__()
        self.deconv = nn.ConvTranspose1d(in_channels, out_channels, kernel_size, stride=stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.deconv(x)


def get_inputs():
    return [torch.randn(BATCH, IN_CHANNELS, LENGTH)]


def get_init_inputs():
    return [IN_CHANNELS, OUT_CHANNELS, KERNEL_SIZE, STRIDE]
