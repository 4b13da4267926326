"""Token embedding lookup plus learned positional embedding, then layer normalization.

category: other
level: 2
"""
import torch
import torch.nn as nn

BATCH = 64
SEQ_LEN = 1024
VOCAB = 32000
MODEL_DIM = 1024


class Model(nn.Module):
    def __init__(self, vocab: int, model_dim: int, seq_len: int):
        super().__init__()
        self.embedding = nn.Embedding(vocab, model_dim)
        self.position = nn.Parameter(torch.randn(seq_len, model_dim) * 0.5)
        self.norm = nn.LayerNorm(model_dim)
        nn.init.normal_(self.norm.weight, 1.0, 0.2)
        nn.init.normal_(self.norm.bias, 0.0, 0.2)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.norm(self.embedding(tokens) + self.position)


def get_inputs():
    return [torch.randint(0, VOCAB, (BATCH, SEQ_LEN))]


def get_init_inputs():
    return [VOCAB, MODEL_DIM, SEQ_LEN]
