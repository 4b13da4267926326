"""Attention with ALiBi distance penalties: per-head linear bias on |i - j| added to the scores.

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
    def __init__(self, num_heads: int, seq_len: int):
        super().__init__()
        slopes = torch.tensor([2.0 ** (-8.0 * (h + 1) / num_heads) for h in range(num_heads)])
        positions = torch.arange(seq_len)
        distance = (positions[None, :] - positions[:, None]).abs().float()
        self.register_buffer("bias", -slopes[:, None, None] * distance)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1]) + self.bias
        return torch.matmul(torch.softmax(scores, dim=-1), v)


def get_inputs():
    shape = (BATCH, NUM_HEADS, SEQ_LEN, HEAD_DIM)
    return [torch.randn(shape), torch.randn(shape), torch.randn(shape)]


def get_init_inputs():
    return [NUM_HEADS, SEQ_LEN]
