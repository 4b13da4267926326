"""Binary focal loss (gamma 2, alpha 0.25) on multi-label logits, averaged per sample.

category: loss
level: 1
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 8192
NUM_LABELS = 4096


class Model(nn.Module):
    def __init__(self, gamma: float = 2.0, alpha: float = 0.25):
        super().__init__()
        self.gamma = gamma
        self.alpha = alpha

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        p = torch.sigmoid(logits)
        ce = F.binary_cross_entropy_with_logits(logits, targets, reduction="none")
        p_t = p * targets + (1.0 - p) * (1.0 - targets)
        alpha_t = self.alpha * targets + (1.0 - self.alpha) * (1.0 - targets)
        return (alpha_t * (1.0 - p_t) ** self.gamma * ce).mean(dim=-1)


def get_inputs():
    logits = torch.randn(BATCH, NUM_LABELS) * (torch.rand(BATCH, 1) * 4.0 + 0.5)
    targets = torch.randint(0, 2, (BATCH, NUM_LABELS)).float()
    return [logits, targets]


def get_init_inputs():
    return []
