"""Row-wise softmax over a wide vocabulary dimension.

category: attention
level: 1
"""
import torch
import torch.nn as nn

BATCH = 16384
VOCAB = 8192


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        return torch.softmax(logits, dim=-1)


def get_inputs():
    # a spread of 3 keeps rows far from uniform and far from one-hot
    return [torch.randn(BATCH, VOCAB) * 3.0]


def get_init_inputs():
    return []
