"""Range (maximum minus minimum) along the last dimension.

category: reduction
level: 1
"""
import torch
import torch.nn as nn

BATCH = 128
CHANNELS = 256
LENGTH = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.amax(x, dim=-1) - torch.amin(x, dim=-1)


def get_inputs():
    # per-row spread, so ranges differ from row to row
    return [torch.randn(BATCH, CHANNELS, LENGTH) * (torch.rand(BATCH, CHANNELS, 1) * 2.0 + 0.1)]


def get_init_inputs():
    return []
