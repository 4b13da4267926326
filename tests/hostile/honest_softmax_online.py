"""family: honest (online softmax: a running max and sum over blocks of a row, then a
second pass; another summation order than the reference's)."""
# problem: ref_softmax
# expect: certified
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, out_ptr, rows, cols, stride, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    r = tl.program_id(0) * ROWS + tl.arange(0, ROWS)[:, None]
    offsets = tl.arange(0, BLOCK)[None, :]
    running_max = tl.full((ROWS, BLOCK), -float("inf"), tl.float32)
    running_sum = tl.zeros((ROWS, BLOCK), tl.float32)
    for start in range(0, cols, BLOCK):
        mask = (r < rows) & (start + offsets < cols)
        x = tl.load(x_ptr + r * stride + start + offsets, mask=mask, other=-float("inf"))
        new_max = tl.maximum(running_max, x)
        scale = tl.where(new_max == -float("inf"), 0.0, tl.exp(running_max - new_max))
        running_sum = running_sum * scale + tl.where(mask, tl.exp(x - new_max), 0.0)
        running_max = new_max
    row_max = tl.max(running_max, axis=1)[:, None]
    total = tl.sum(running_sum * tl.exp(running_max - row_max), axis=1)[:, None]
    for start in range(0, cols, BLOCK):
        mask = (r < rows) & (start + offsets < cols)
        x = tl.load(x_ptr + r * stride + start + offsets, mask=mask, other=-float("inf"))
        tl.store(out_ptr + r * stride + start + offsets, tl.exp(x - row_max) / total, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        rows, cols = x.shape
        out = torch.empty_like(x)
        softmax_kernel[(triton.cdiv(rows, 16),)](x, out, rows, cols, x.stride(0), ROWS=16,
                                                 BLOCK=128)
        return out
