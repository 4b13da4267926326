"""Complex numbers as real/imaginary tensors mapped to log1p(|z|) * cos(3 arg z).

category: elementwise
level: 1
"""
import torch
import torch.nn as nn

ROWS = 8192
COLS = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, real: torch.Tensor, imag: torch.Tensor) -> torch.Tensor:
        magnitude = torch.hypot(real, imag)
        phase = torch.atan2(imag, real)
        return torch.log1p(magnitude) * torch.cos(3.0 * phase)


def get_inputs():
    return [torch.randn(ROWS, COLS), torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
