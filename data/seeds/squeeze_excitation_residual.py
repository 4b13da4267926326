"""Conv-BN-ReLU stage with squeeze-and-excitation channel gates, a residual and a ReLU.

category: block
level: 3
"""
import torch
import torch.nn as nn

BATCH = 32
CHANNELS = 128
HEIGHT = 64
WIDTH = 64
SQUEEZE = 16


class Model(nn.Module):
    def __init__(self, channels: int, squeezed: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.norm = nn.BatchNorm2d(channels)
        nn.init.normal_(self.norm.weight, 1.0, 0.2)
        nn.init.normal_(self.norm.bias, 0.0, 0.2)
        self.fc1 = nn.Linear(channels, squeezed)
        self.fc2 = nn.Linear(squeezed, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.norm(self.conv(x)))
        gates = torch.sigmoid(self.fc2(torch.relu(self.fc1(y.mean(dim=(2, 3))))))
        return torch.relu(x + y * gates[:, :, None, None])


def get_inputs():
    # images of different contrast, so the squeezed channel statistics differ per sample
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH) * (torch.rand(BATCH, 1, 1, 1) * 2.0 + 0.2)]


def get_init_inputs():
    return [CHANNELS, CHANNELS // SQUEEZE]
