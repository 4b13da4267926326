"""Feed-forward network with two GELU hidden layers (model dim -> 4x -> 4x -> model dim).

category: block
level: 3
"""
import torch
import torch.nn as nn

TOKENS = 4096
MODEL_DIM = 1024
HIDDEN = 4096


class Model(nn.Module):
    def __init__(self, model_dim: int, hidden: int):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(model_dim, hidden),
            nn.GELU(),
            nn.Linear(hidden, hidden),
            nn.GELU(),
            nn.Linear(hidden, model_dim),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


def get_inputs():
    return [torch.randn(TOKENS, MODEL_DIM) * 2.0]


def get_init_inputs():
    return [MODEL_DIM, HIDDEN]
