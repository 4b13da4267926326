import torch
import torch.nn as nn


class Model(nn.Module):
    """
    Convolution, GELU, a learned per-channel gain, then max pooling (KernelBench layout: lowercase
    sizes defined after the class and passed through get_init_inputs).
    """
    def __init__(self, in_channels, out_channels, kernel_size, gain_shape, pool_kernel_size):
        super(Model, self).__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.gain = nn.Parameter(torch.rand(gain_shape) + 0.5)
        self.pool = nn.MaxPool2d(pool_kernel_size)

    def forward(self, x):
        # Convolution
        x = self.conv(x)
        # GELU activation
        x = torch.nn.functional.gelu(x)
        # Per-channel gain
        x = x * self.gain
        # Pooling
        x = self.pool(x)
        return x

batch_size = 64
in_channels = 8
out_channels = 24
height, width = 48, 48
kernel_size = 3
gain_shape = (out_channels, 1, 1)
pool_kernel_size = 2

def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]

def get_init_inputs():
    return [in_channels, out_channels, kernel_size, gain_shape, pool_kernel_size]
