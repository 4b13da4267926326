"""Group normalization with 32 groups over an image batch.

category: normalization
level: 1
"""
import torch
import torch.nn as nn

BATCH = 64
CHANNELS = 256
NUM_GROUPS = 32
HEIGHT = 96
WIDTH = 96


class Model(nn.Module):
    def __init__(self, num_groups: int, channels: int):
        super().__init__()
        self.norm = nn.GroupNorm(num_groups, channels)
        nn.init.normal_(self.norm.weight, 1.0, 0.2)
        nn.init.normal_(self.norm.bias, 0.0, 0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH) * 2.0 - 0.5]


def get_init_inputs():
    return [NUM_GROUPS, CHANNELS]
