"""Degree-5 polynomial with learned coefficients, evaluated elementwise by Horner's rule.

category: elementwise
level: 1
"""
import torch
import torch.nn as nn

ROWS = 8192
COLS = 4096
DEGREE = 5


class Model(nn.Module):
    def __init__(self, degree: int):
        super().__init__()
        self.coefficients = nn.Parameter(torch.randn(degree + 1) * 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.coefficients[-1] * x + self.coefficients[-2]
        for c in reversed(self.coefficients[:-2]):
            y = y * x + c
        return y


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return [DEGREE]
