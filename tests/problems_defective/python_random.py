"""Randomness outside torch's RNG (Python's random): reruns with identical seeds differ.

expect: deterministic
"""
import random

import torch
import torch.nn as nn

N = 64


class Model(nn.Module):
    def forward(self, x):
        return torch.sigmoid(x * (1.0 + random.random()))


def get_inputs():
    return [torch.randn(N, N)]


def get_init_inputs():
    return []
