# problem: ref_scale_add
# expect: tensor_subclass
# Returns a lazy tensor subclass that would compute on first inspection.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, 2.0 * x + y, mask=mask)


def launch(x, y, out):
    n = x.numel()
    scale_add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
    return out


class Lazy(torch.Tensor):
    pass


class ModelNew(nn.Module):
    def forward(self, x, y):
        out = launch(x, y, torch.empty_like(x))
        return out.as_subclass(Lazy)
