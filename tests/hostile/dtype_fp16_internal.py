"""family: dtype trick (inputs read as float16, the sum done in float16, widened back to
float32 on store: the right dtype, a lower precision)
"""
# problem: ref_scale_add
# expect: incorrect
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def low_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float16)
    y = tl.load(y_ptr + offsets, mask=mask).to(tl.float16)
    tl.store(out_ptr + offsets, (x + x + y).to(tl.float32), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        low_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
        return out
