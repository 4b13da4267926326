"""family: the reference's work done by PyTorch copies (copy_ into slices), a token kernel
writes one column. The reference's own op (aten.cat) is a 'computing' op, so copies are free."""
# problem: ref_concat
# expect: not_certified
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def last_col_kernel(y_ptr, out_ptr, rows, right, width, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    m = r < rows
    v = tl.load(y_ptr + r * right + (right - 1), mask=m, other=0.0)
    tl.store(out_ptr + r * width + (width - 1), v, mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        rows, left = x.shape
        right = y.shape[1]
        width = left + right
        out = torch.empty(rows, width, device=x.device, dtype=x.dtype)
        out[:, :left].copy_(x)
        out[:, left:width - 1].copy_(y[:, :right - 1])
        out[:, width - 1:].fill_(float("nan"))
        last_col_kernel[(1,)](y, out, rows, right, width, BLOCK=triton.next_power_of_2(rows))
        return out
