"""Triplet margin loss (L2 distance, margin 8) for each anchor/positive/negative triple.

category: loss
level: 1
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 131072
EMBED_DIM = 512


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, anchor: torch.Tensor, positive: torch.Tensor,
                negative: torch.Tensor) -> torch.Tensor:
        return F.triplet_margin_loss(anchor, positive, negative, margin=8.0, reduction="none")


def get_inputs():
    anchor = torch.randn(BATCH, EMBED_DIM)
    # positives drift from the anchor by a random amount, so some triples are inside the margin
    positive = anchor + torch.randn(BATCH, EMBED_DIM) * (torch.rand(BATCH, 1) * 2.0)
    return [anchor, positive, torch.randn(BATCH, EMBED_DIM)]


def get_init_inputs():
    return []
