"""Cosine embedding loss with +1/-1 pair labels and margin 0.2, per pair.

category: loss
level: 1
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 65536
EMBED_DIM = 1024


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x1: torch.Tensor, x2: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.cosine_embedding_loss(x1, x2, labels, margin=0.2, reduction="none")


def get_inputs():
    x1 = torch.randn(BATCH, EMBED_DIM)
    # pairs with cosine similarity spread over (-1, 1)
    x2 = x1 * (torch.rand(BATCH, 1) * 4.0 - 2.0) + torch.randn(BATCH, EMBED_DIM)
    labels = torch.randint(0, 2, (BATCH,)).float() * 2.0 - 1.0
    return [x1, x2, labels]


def get_init_inputs():
    return []
