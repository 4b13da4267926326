# problem: ref_concat
# expect: torch_compute
# PyTorch copies assemble the answer (copies are allowed ops); a decoy kernel runs beside them.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def touch_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.load(x_ptr + offsets, mask=offsets < n)


class ModelNew(nn.Module):
    def forward(self, x, y):
        touch_kernel[(1,)](x, 0, BLOCK=16)
        out = torch.empty(x.shape[0], x.shape[1] + y.shape[1], device=x.device, dtype=x.dtype)
        out[:, : x.shape[1]].copy_(x)
        out[:, x.shape[1]:].copy_(y)
        return out
