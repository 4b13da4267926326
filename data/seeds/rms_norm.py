"""RMS normalization with a learned gain, written out in elementary operations.

category: normalization
level: 1
"""
import torch
import torch.nn as nn

TOKENS = 16384
HIDDEN = 4096


class Model(nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rms = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return x * rms * self.weight


def get_inputs():
    return [torch.randn(TOKENS, HIDDEN) * (torch.rand(TOKENS, 1) * 3.0 + 0.1)]


def get_init_inputs():
    return [HIDDEN]
