# problem: ref_transpose
# expect: torch_compute
# The reference is a copy; so is this answer (copies are free only when the reference is no copy).
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def touch_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.load(x_ptr + offsets, mask=offsets < n)


class ModelNew(nn.Module):
    def forward(self, x):
        touch_kernel[(1,)](x, 0, BLOCK=16)
        return x.t().contiguous()
