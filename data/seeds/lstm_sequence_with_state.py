"""Single-layer LSTM over a sequence from a given hidden and cell state; returns every hidden state.

category: block
level: 3
"""
import torch
import torch.nn as nn

SEQ_LEN = 128
BATCH = 256
INPUT_SIZE = 256
HIDDEN_SIZE = 512


class Model(nn.Module):
    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.lstm = nn.LSTM(input_size, hidden_size)

    def forward(self, x: torch.Tensor, h0: torch.Tensor, c0: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(x, (h0, c0))
        return out


def get_inputs():
    return [torch.randn(SEQ_LEN, BATCH, INPUT_SIZE),
            torch.tanh(torch.randn(1, BATCH, HIDDEN_SIZE)),
            torch.randn(1, BATCH, HIDDEN_SIZE)]


def get_init_inputs():
    return [INPUT_SIZE, HIDDEN_SIZE]
