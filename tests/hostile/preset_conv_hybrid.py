"""family: policy presets (the convolution left to cuDNN, bias + ReLU + residual add fused in one
Triton kernel: a KernelBench level-2 answer)

Certified under ``library`` and ``kernelbench`` (its kernel must carry 30% of the GPU time;
the problem's 1x1 convolution keeps it clear of that line); under ``strict`` the convolution is
library compute in forward.
"""
# problem: ref_conv_residual
# expect: certified
import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def bias_relu_add_kernel(y_ptr, bias_ptr, res_ptr, out_ptr, n, plane, channels,
                         BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    channel = (offsets // plane) % channels
    y = tl.load(y_ptr + offsets, mask=mask) + tl.load(bias_ptr + channel, mask=mask)
    out = tl.maximum(y, 0.0) + tl.load(res_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, out, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)

    def forward(self, x, residual):
        y = F.conv2d(x, self.conv.weight)  # no bias here: the Triton kernel adds it
        residual = residual.contiguous()
        out = torch.empty_like(y)
        n = y.numel()
        bias_relu_add_kernel[(triton.cdiv(n, 1024),)](
            y, self.conv.bias, residual, out, n, y.shape[2] * y.shape[3], y.shape[1],
            BLOCK=1024)
        return out
