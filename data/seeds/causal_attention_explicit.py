"""Causal attention written out: scaled scores, upper-triangular mask, softmax, weighted sum.

category: attention
level: 1
"""
import math

import torch
import torch.nn as nn

BATCH = 8
NUM_HEADS = 16
SEQ_LEN = 1024
HEAD_DIM = 64


class Model(nn.Module):
    def __init__(self, seq_len: int):
        super().__init__()
        mask = torch.triu(torch.ones(seq_len, seq_len, dtype=torch.bool), diagonal=1)
        self.register_buffer("mask", mask)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        scores = scores.masked_fill(self.mask, float("-inf"))
        return torch.matmul(torch.softmax(scores, dim=-1), v)


def get_inputs():
    shape = (BATCH, NUM_HEADS, SEQ_LEN, HEAD_DIM)
    return [torch.randn(shape), torch.randn(shape), torch.randn(shape)]


def get_init_inputs():
    return [SEQ_LEN]
