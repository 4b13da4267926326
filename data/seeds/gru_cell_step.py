"""One GRU cell step: new hidden state from an input batch and the previous hidden state.

category: block
level: 3
"""
import torch
import torch.nn as nn

BATCH = 8192
INPUT_SIZE = 1024
HIDDEN_SIZE = 1024


class Model(nn.Module):
    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.cell = nn.GRUCell(input_size, hidden_size)

    def forward(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        return self.cell(x, h)


def get_inputs():
    return [torch.randn(BATCH, INPUT_SIZE), torch.tanh(torch.randn(BATCH, HIDDEN_SIZE))]


def get_init_inputs():
    return [INPUT_SIZE, HIDDEN_SIZE]
