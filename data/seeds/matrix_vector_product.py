"""Matrix-vector product with a large dense matrix (memory bound).

category: matmul
level: 1
"""
import torch
import torch.nn as nn

ROWS = 16384
COLS = 16384


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, matrix: torch.Tensor, vector: torch.Tensor) -> torch.Tensor:
        return torch.mv(matrix, vector)


def get_inputs():
    return [torch.randn(ROWS, COLS), torch.randn(COLS)]


def get_init_inputs():
    return []
