"""InfoNCE contrastive loss between paired embeddings (cosine similarities / 0.07), per anchor.

category: loss
level: 1
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 8192
EMBED_DIM = 512


class Model(nn.Module):
    def __init__(self, temperature: float = 0.07):
        super().__init__()
        self.temperature = temperature

    def forward(self, anchors: torch.Tensor, positives: torch.Tensor) -> torch.Tensor:
        a = F.normalize(anchors, dim=-1)
        p = F.normalize(positives, dim=-1)
        logits = torch.matmul(a, p.transpose(0, 1)) / self.temperature
        labels = torch.arange(logits.shape[0], device=logits.device)
        return F.cross_entropy(logits, labels, reduction="none")


def get_inputs():
    anchors = torch.randn(BATCH, EMBED_DIM)
    positives = anchors + torch.randn(BATCH, EMBED_DIM) * (torch.rand(BATCH, 1) * 3.0)
    return [anchors, positives]


def get_init_inputs():
    return []
