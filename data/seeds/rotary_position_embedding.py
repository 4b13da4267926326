"""Rotary position embedding applied to per-head query vectors (rotate-half form, base 10000).

category: elementwise
level: 1
"""
import torch
import torch.nn as nn

BATCH = 16
HEADS = 16
SEQ_LEN = 2048
HEAD_DIM = 64


class Model(nn.Module):
    def __init__(self, seq_len: int, head_dim: int):
        super().__init__()
        inv_freq = 1.0 / (10000.0 ** (torch.arange(0, head_dim, 2).float() / head_dim))
        angles = torch.outer(torch.arange(seq_len).float(), inv_freq)
        angles = torch.cat([angles, angles], dim=-1)
        self.register_buffer("cos", angles.cos())
        self.register_buffer("sin", angles.sin())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * self.cos + rotated * self.sin


def get_inputs():
    return [torch.randn(BATCH, HEADS, SEQ_LEN, HEAD_DIM)]


def get_init_inputs():
    return [SEQ_LEN, HEAD_DIM]
