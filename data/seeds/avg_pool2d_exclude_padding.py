"""5x5 average pooling with stride 1 whose border windows average only the real pixels.

category: pooling
level: 1
"""
import torch
import torch.nn as nn

BATCH = 32
CHANNELS = 64
HEIGHT = 256
WIDTH = 256


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.AvgPool2d(kernel_size=5, stride=1, padding=2, count_include_pad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return []
