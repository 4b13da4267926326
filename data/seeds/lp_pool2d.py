"""Power-average (L2) 2-D pooling, 3x3 window, stride 2.

category: pooling
level: 1
"""
import torch
import torch.nn as nn

BATCH = 32
CHANNELS = 64
HEIGHT = 192
WIDTH = 192


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.LPPool2d(norm_type=2, kernel_size=3, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return []
