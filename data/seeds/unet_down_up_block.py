"""U-Net style level: conv, max-pool, conv, nearest upsample, concatenation with the skip, 1x1 fuse.

category: block
level: 3
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 16
CHANNELS = 64
HEIGHT = 128
WIDTH = 128


class Model(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.encode = nn.Conv2d(channels, channels, 3, padding=1)
        self.bottom = nn.Conv2d(channels, 2 * channels, 3, padding=1)
        self.fuse = nn.Conv2d(3 * channels, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skip = torch.relu(self.encode(x))
        y = torch.relu(self.bottom(F.max_pool2d(skip, 2)))
        y = F.interpolate(y, scale_factor=2, mode="nearest")
        return self.fuse(torch.cat([skip, y], dim=1))


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [CHANNELS]
