"""family: library work in a GEMM's name (the residual add done by ``addbmm`` with an identity
matrix, an op torch's FLOP formulas leave out, beside a Triton kernel for the bias and ReLU: the
vendor-work cap counted none of the identity GEMM's FLOPs)
"""
# problem: ref_conv_residual
# expect: torch_compute
import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def bias_relu_kernel(y_ptr, bias_ptr, out_ptr, n, plane, channels, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    channel = (offsets // plane) % channels
    y = tl.load(y_ptr + offsets, mask=mask) + tl.load(bias_ptr + channel, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(y, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)

    def forward(self, x, residual):
        y = F.conv2d(x, self.conv.weight)
        relu = torch.empty_like(y)
        n = y.numel()
        bias_relu_kernel[(triton.cdiv(n, 1024),)](y, self.conv.bias, relu, n,
                                                  y.shape[2] * y.shape[3], y.shape[1],
                                                  BLOCK=1024)
        b, c, h, w = relu.shape
        # an identity over the (batch, channel) rows, made of a fill: it adds the residual
        eye = torch.zeros(b * c, b * c, device=y.device, dtype=y.dtype)
        eye.diagonal().fill_(1.0)
        out = torch.addbmm(residual.reshape(b * c, h * w), eye[None],
                           relu.view(1, b * c, h * w))
        return out.view(b, c, h, w)
