"""Log of the positive part: -inf wherever the input is not positive.

category: elementwise
level: 1
"""
import torch
import torch.nn as nn

N = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.log(torch.relu(x))


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []
