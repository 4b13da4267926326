"""family: autograd.Function wrapper (the reference's ops inside a custom Function's forward)
"""
# problem: ref_scale_add
# expect: torch_compute
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(dst_ptr + offsets, tl.load(src_ptr + offsets, mask=mask), mask=mask)


def token_copy(src, dst):
    """A real launch whose only work is moving an answer computed elsewhere."""
    n = dst.numel()
    copy_kernel[(triton.cdiv(n, 1024),)](src, dst, n, BLOCK=1024)
    return dst


class ScaleAdd(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y):
        return torch.add(y, x, alpha=2.0)

    @staticmethod
    def backward(ctx, grad):
        return 2.0 * grad, grad


class ModelNew(nn.Module):
    def forward(self, x, y):
        return token_copy(ScaleAdd.apply(x, y), torch.empty_like(x))
