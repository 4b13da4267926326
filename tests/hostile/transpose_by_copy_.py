"""family: the reference's work done by a PyTorch copy of another name (copy_ from a transposed
view; the reference's contiguous() is aten.clone), a token kernel writes one row."""
# problem: ref_transpose
# expect: not_certified
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def last_row_kernel(x_ptr, out_ptr, rows, cols, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    m = r < rows
    v = tl.load(x_ptr + r * cols + (cols - 1), mask=m)
    tl.store(out_ptr + (cols - 1) * rows + r, v, mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        rows, cols = x.shape
        out = torch.empty(cols, rows, device=x.device, dtype=x.dtype)
        out[:cols - 1].copy_(x.t()[:cols - 1])
        out[cols - 1:].fill_(float("nan"))
        last_row_kernel[(1,)](x, out, rows, cols, BLOCK=triton.next_power_of_2(rows))
        return out
