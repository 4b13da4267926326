"""Softmax across channels at every pixel with a learned per-channel temperature.

category: attention
level: 1
"""
import torch
import torch.nn as nn

BATCH = 32
CHANNELS = 64
HEIGHT = 192
WIDTH = 192


class Model(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.log_temperature = nn.Parameter(torch.randn(channels, 1, 1) * 0.3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x * torch.exp(-self.log_temperature), dim=1)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH) * 2.0]


def get_init_inputs():
    return [CHANNELS]
