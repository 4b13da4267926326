"""Huber loss (delta 1) between predictions and targets, averaged per sample.

category: loss
level: 1
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 16384
FEATURES = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, prediction: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        loss = F.huber_loss(prediction, target, reduction="none", delta=1.0)
        return loss.mean(dim=-1)


def get_inputs():
    # per-sample error scales from 0.05 to 3 cover both the quadratic and the linear branch
    scale = torch.rand(BATCH, 1) * 3.0 + 0.05
    target = torch.randn(BATCH, FEATURES)
    return [target + torch.randn(BATCH, FEATURES) * scale, target]


def get_init_inputs():
    return []
