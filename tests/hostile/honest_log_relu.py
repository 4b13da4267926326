"""family: honest (elementwise with -inf outputs)."""
# problem: ref_log_relu
# expect: certified
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def log_relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask, other=1.0)
    tl.store(out_ptr + offsets, tl.log(tl.maximum(x, 0.0)), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        log_relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return out
