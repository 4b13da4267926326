"""Gather rows of a table by integer index (index_select) and scale each feature by a learned gain.

category: other
level: 1
"""
import torch
import torch.nn as nn

TABLE_ROWS = 65536
FEATURES = 1024
NUM_INDICES = 262144


class Model(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.gain = nn.Parameter(torch.randn(features))

    def forward(self, table: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
        return torch.index_select(table, 0, indices) * self.gain


def get_inputs():
    return [torch.randn(TABLE_ROWS, FEATURES), torch.randint(0, TABLE_ROWS, (NUM_INDICES,))]


def get_init_inputs():
    return [FEATURES]
