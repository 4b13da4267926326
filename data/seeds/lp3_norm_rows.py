"""L3 vector norm of each row.

category: reduction
level: 1
"""
import torch
import torch.nn as nn

ROWS = 65536
COLS = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.linalg.vector_norm(x, ord=3, dim=-1)


def get_inputs():
    return [torch.randn(ROWS, COLS) * (torch.rand(ROWS, 1) * 2.0 + 0.1)]


def get_init_inputs():
    return []
