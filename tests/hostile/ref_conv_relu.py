"""A convolution followed by a ReLU (a KernelBench level-2 shape: library work plus a fusable
elementwise tail).

category: conv
level: 2
"""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)

    def forward(self, x):
        return torch.relu(self.conv(x))


BATCH, HEIGHT, WIDTH = 16, 32, 32  # KernelBench level-2 convolution sizes


def get_inputs():
    return [torch.randn(BATCH, 3, HEIGHT, WIDTH)]


def get_init_inputs():
    return [3, 16, 3]
