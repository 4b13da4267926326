"""Hard-swish followed by a leaky ReLU on its negative lobe.

category: activation
level: 1
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

ROWS = 16384
COLS = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.leaky_relu(F.hardswish(x), negative_slope=0.2)


def get_inputs():
    # spread 3 reaches both saturation points of hard-swish (+-3)
    return [torch.randn(ROWS, COLS) * 3.0]


def get_init_inputs():
    return []
