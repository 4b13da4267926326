"""Parametric ReLU with one learned negative slope per channel on an image batch.

category: activation
level: 1
"""
import torch
import torch.nn as nn

BATCH = 64
CHANNELS = 256
HEIGHT = 128
WIDTH = 128


class Model(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.prelu = nn.PReLU(channels)
        # distinct slopes per channel, so a kernel that ignores the weights is caught
        nn.init.uniform_(self.prelu.weight, 0.05, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.prelu(x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [CHANNELS]
