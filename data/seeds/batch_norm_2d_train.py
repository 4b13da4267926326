"""2-D batch normalization in training mode (statistics of the current batch).

category: normalization
level: 1
"""
import torch
import torch.nn as nn

BATCH = 64
CHANNELS = 128
HEIGHT = 128
WIDTH = 128


class Model(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.norm = nn.BatchNorm2d(channels)
        nn.init.normal_(self.norm.weight, 1.0, 0.2)
        nn.init.normal_(self.norm.bias, 0.0, 0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH) * 1.5 + 0.3]


def get_init_inputs():
    return [CHANNELS]
