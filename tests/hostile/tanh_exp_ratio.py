"""family: specialized to the input range (tanh as (e^2x - 1) / (e^2x + 1): infinity over
infinity, NaN, for an input above ~44, which the problem's own draws never reach)
"""
# problem: ref_tanh
# expect: not_general
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def tanh_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    e = tl.exp(2.0 * x)
    tl.store(out_ptr + offsets, (e - 1.0) / (e + 1.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        tanh_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return out
