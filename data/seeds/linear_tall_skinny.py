"""Fully connected layer applied to many tokens: a tall input times a wide weight, plus bias.

category: matmul
level: 1
"""
import torch
import torch.nn as nn

TOKENS = 16384
IN_FEATURES = 1024
OUT_FEATURES = 4096


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)


def get_inputs():
    return [torch.randn(TOKENS, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]
