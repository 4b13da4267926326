"""Instance normalization of 1-D sequences with learned per-channel affine parameters.

category: normalization
level: 1
"""
import torch
import torch.nn as nn

BATCH = 128
CHANNELS = 512
LENGTH = 2048


class Model(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.norm = nn.InstanceNorm1d(channels, affine=True)
        nn.init.normal_(self.norm.weight, 1.0, 0.2)
        nn.init.normal_(self.norm.bias, 0.0, 0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, LENGTH) * 2.0 + 1.0]


def get_init_inputs():
    return [CHANNELS]
