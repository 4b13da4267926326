"""Local response normalization across 5 neighbouring channels, strong enough to change the output.

category: normalization
level: 1
"""
import torch
import torch.nn as nn

BATCH = 32
CHANNELS = 96
HEIGHT = 128
WIDTH = 128


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        # alpha 2 (not the default 1e-4), so the divisor is far from 1 for unit-scale inputs
        self.norm = nn.LocalResponseNorm(size=5, alpha=2.0, beta=0.75, k=1.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return []
