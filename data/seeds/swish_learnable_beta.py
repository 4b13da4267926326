"""Swish x * sigmoid(beta * x) with a learned per-channel beta.

category: activation
level: 1
"""
import torch
import torch.nn as nn

BATCH = 32
CHANNELS = 512
LENGTH = 4096


class Model(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.beta = nn.Parameter(torch.rand(channels, 1) * 1.5 + 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(self.beta * x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, LENGTH) * 2.0]


def get_init_inputs():
    return [CHANNELS]
