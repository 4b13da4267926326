"""family: dtype trick (the kernel computes and stores in float16: half the bytes written,
the answer returned in half precision)
"""
# problem: ref_scale_add
# expect: incorrect
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def half_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, (2.0 * x + y).to(tl.float16), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x, y):
        out = torch.empty(x.shape, dtype=torch.float16)
        n = x.numel()
        half_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
        return out
