"""Eight largest values of each row, in descending order.

category: reduction
level: 1
"""
import torch
import torch.nn as nn

ROWS = 65536
COLS = 4096
TOP_K = 8


class Model(nn.Module):
    def __init__(self, k: int):
        super().__init__()
        self.k = k

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.topk(x, self.k, dim=-1).values


def get_inputs():
    return [torch.randn(ROWS, COLS) + torch.randn(ROWS, 1) * 2.0]


def get_init_inputs():
    return [TOP_K]
