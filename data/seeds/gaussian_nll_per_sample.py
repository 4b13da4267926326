"""Gaussian negative log-likelihood with a predicted variance (softplus of a raw input), per sample.

category: loss
level: 1
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 16384
FEATURES = 2048


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, mean: torch.Tensor, target: torch.Tensor,
                raw_var: torch.Tensor) -> torch.Tensor:
        var = F.softplus(raw_var) + 1e-3
        return F.gaussian_nll_loss(mean, target, var, reduction="none").mean(dim=-1)


def get_inputs():
    target = torch.randn(BATCH, FEATURES)
    mean = target + torch.randn(BATCH, FEATURES) * (torch.rand(BATCH, 1) * 2.0)
    return [mean, target, torch.randn(BATCH, FEATURES)]


def get_init_inputs():
    return []
