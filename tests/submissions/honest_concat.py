# problem: ref_concat
# expect: certified
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def concat_kernel(x_ptr, y_ptr, out_ptr, left, right, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    width = left + right
    from_x = tl.load(x_ptr + row * left + cols, mask=cols < left, other=0.0)
    from_y = tl.load(y_ptr + row * right + (cols - left), mask=(cols >= left) & (cols < width),
                     other=0.0)
    tl.store(out_ptr + row * width + cols, tl.where(cols < left, from_x, from_y),
             mask=cols < width)


class ModelNew(nn.Module):
    def forward(self, x, y):
        x, y = x.contiguous(), y.contiguous()
        rows, left = x.shape
        right = y.shape[1]
        out = torch.empty(rows, left + right, device=x.device, dtype=x.dtype)
        concat_kernel[(rows,)](x, y, out, left, right,
                               BLOCK=triton.next_power_of_2(left + right))
        return out
