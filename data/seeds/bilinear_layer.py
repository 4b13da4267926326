"""Bilinear layer y_o = x1^T W_o x2 + b_o over a batch of vector pairs.

Eager PyTorch runs one batched GEMM pair per output feature (thousands of launches and views
at 512 features: 19 ms of host issue for 9.8 ms of GPU work on an H200, launch-overhead
bound); 128 features over 16384 pairs keep each launch's work above its issue time.

category: matmul
level: 1
"""
import torch
import torch.nn as nn

BATCH = 16384
IN1_FEATURES = 256
IN2_FEATURES = 256
OUT_FEATURES = 128


class Model(nn.Module):
    def __init__(self, in1_features: int, in2_features: int, out_features: int):
        super().__init__()
        self.bilinear = nn.Bilinear(in1_features, in2_features, out_features)

    def forward(self, x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
        return self.bilinear(x1, x2)


def get_inputs():
    return [torch.randn(BATCH, IN1_FEATURES), torch.randn(BATCH, IN2_FEATURES)]


def get_init_inputs():
    return [IN1_FEATURES, IN2_FEATURES, OUT_FEATURES]
