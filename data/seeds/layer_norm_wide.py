"""Layer normalization over a wide hidden dimension with learned affine parameters.

category: normalization
level: 1
"""
import torch
import torch.nn as nn

TOKENS = 32768
HIDDEN = 8192


class Model(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        # non-trivial affine parameters, so a kernel that ignores them is caught
        nn.init.normal_(self.norm.weight, 1.0, 0.2)
        nn.init.normal_(self.norm.bias, 0.0, 0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


def get_inputs():
    return [torch.randn(TOKENS, HIDDEN) * 2.0 + 0.5]


def get_init_inputs():
    return [HIDDEN]
