"""Multi-class hinge loss (margin 1) of class scores against integer labels, per sample.

category: loss
level: 1
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 32768
NUM_CLASSES = 8192


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, scores: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.multi_margin_loss(scores, targets, margin=1.0, reduction="none")


def get_inputs():
    scores = torch.randn(BATCH, NUM_CLASSES) * (torch.rand(BATCH, 1) + 0.1)
    return [scores, torch.randint(0, NUM_CLASSES, (BATCH,))]


def get_init_inputs():
    return []
