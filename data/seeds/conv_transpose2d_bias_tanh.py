"""Stride-2 transposed convolution, learned per-channel bias, tanh, doubled.

category: fused
level: 2
"""
import torch
import torch.nn as nn

BATCH = 32
IN_CHANNELS = 64
OUT_CHANNELS = 32
HEIGHT = 64
WIDTH = 64


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.deconv = nn.ConvTranspose2d(in_channels, out_channels, 4, stride=2, padding=1)
        self.bias = nn.Parameter(torch.randn(out_channels, 1, 1) * 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # pre-activations have a spread of about 1: curved, but rarely saturated
        return torch.tanh(self.deconv(x) + self.bias) * 2.0


def get_inputs():
    return [torch.randn(BATCH, IN_CHANNELS, HEIGHT, WIDTH) * 2.5]


def get_init_inputs():
    return [IN_CHANNELS, OUT_CHANNELS]
