"""Pre-norm transformer block: causal multi-head self-attention and a GELU MLP, both residual.

category: block
level: 3
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 8
SEQ_LEN = 512
MODEL_DIM = 768
NUM_HEADS = 12
MLP_DIM = 3072


class Model(nn.Module):
    def __init__(self, model_dim: int, num_heads: int, mlp_dim: int):
        super().__init__()
        self.num_heads = num_heads
        self.norm1 = nn.LayerNorm(model_dim)
        self.qkv = nn.Linear(model_dim, 3 * model_dim)
        self.proj = nn.Linear(model_dim, model_dim)
        self.norm2 = nn.LayerNorm(model_dim)
        self.fc1 = nn.Linear(model_dim, mlp_dim)
        self.fc2 = nn.Linear(mlp_dim, model_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        qkv = self.qkv(self.norm1(x)).view(b, s, 3, self.num_heads, d // self.num_heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, s, d))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


def get_inputs():
    return [torch.randn(BATCH, SEQ_LEN, MODEL_DIM)]


def get_init_inputs():
    return [MODEL_DIM, NUM_HEADS, MLP_DIM]
