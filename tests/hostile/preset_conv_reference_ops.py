"""family: policy presets (the reference's own ops, a Triton copy kernel beside them)

Rejected under every preset: the ReLU and the add are PyTorch's (strict, library), and under
kernelbench PyTorch ran every computing op of the reference (a token copy beside it).
"""
# problem: ref_conv_residual
# expect: torch_compute
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(dst_ptr + offsets, tl.load(src_ptr + offsets, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)

    def forward(self, x, residual):
        y = torch.relu(self.conv(x)) + residual
        out = torch.empty_like(y)
        copy_kernel[(triton.cdiv(y.numel(), 1024),)](y, out, y.numel(), BLOCK=1024)
        return out
