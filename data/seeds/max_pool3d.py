"""Non-overlapping 3-D max pooling (2x2x2 window, stride 2) of a volume batch.

category: pooling
level: 1
"""
import torch
import torch.nn as nn

BATCH = 8
CHANNELS = 32
DEPTH = 64
HEIGHT = 128
WIDTH = 128


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.MaxPool3d(kernel_size=2, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, DEPTH, HEIGHT, WIDTH)]


def get_init_inputs():
    return []
