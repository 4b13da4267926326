"""SwiGLU feed-forward block: silu(x W_gate) * (x W_up), projected back with W_down.

category: block
level: 3
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

TOKENS = 8192
MODEL_DIM = 1024
HIDDEN = 2816


class Model(nn.Module):
    def __init__(self, model_dim: int, hidden: int):
        super().__init__()
        self.gate = nn.Linear(model_dim, hidden, bias=False)
        self.up = nn.Linear(model_dim, hidden, bias=False)
        self.down = nn.Linear(hidden, model_dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


def get_inputs():
    return [torch.randn(TOKENS, MODEL_DIM) * 2.0]


def get_init_inputs():
    return [MODEL_DIM, HIDDEN]
