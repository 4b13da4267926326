"""Per-sample cross-entropy of class logits against integer labels.

category: loss
level: 1
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 16384
NUM_CLASSES = 8192


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, targets, reduction="none")


def get_inputs():
    logits = torch.randn(BATCH, NUM_CLASSES) * (torch.rand(BATCH, 1) * 4.0 + 0.5)
    return [logits, torch.randint(0, NUM_CLASSES, (BATCH,))]


def get_init_inputs():
    return []
