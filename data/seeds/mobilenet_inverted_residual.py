"""Inverted residual: 1x1 expand, 3x3 depthwise, 1x1 project, batch norms, ReLU6, shortcut.

category: block
level: 3
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 32
CHANNELS = 64
HEIGHT = 112
WIDTH = 112
EXPAND_RATIO = 6


class Model(nn.Module):
    def __init__(self, channels: int, expand_ratio: int):
        super().__init__()
        hidden = channels * expand_ratio
        self.expand = nn.Conv2d(channels, hidden, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(hidden)
        self.depthwise = nn.Conv2d(hidden, hidden, 3, padding=1, groups=hidden, bias=False)
        self.bn2 = nn.BatchNorm2d(hidden)
        self.project = nn.Conv2d(hidden, channels, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(channels)
        # gains of 1-4 push a few percent of activations past ReLU6's upper clip
        for norm in (self.bn1, self.bn2):
            nn.init.uniform_(norm.weight, 1.0, 4.0)
            nn.init.normal_(norm.bias, 0.0, 0.5)
        nn.init.normal_(self.bn3.weight, 1.0, 0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu6(self.bn1(self.expand(x)))
        y = F.relu6(self.bn2(self.depthwise(y)))
        return x + self.bn3(self.project(y))


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [CHANNELS, EXPAND_RATIO]
