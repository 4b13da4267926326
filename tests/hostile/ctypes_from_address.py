"""family: foreign function interface (ctypes arrays over the tensors' memory: the answer is
computed in Python on raw floats, no tensor API involved)
"""
# problem: ref_scale_add
# expect: forbidden_api
import ctypes

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


class ModelNew(nn.Module):
    def forward(self, x, y):
        n = x.numel()
        staged = torch.empty_like(x)
        a = (ctypes.c_float * n).from_address(x.data_ptr())
        b = (ctypes.c_float * n).from_address(y.data_ptr())
        c = (ctypes.c_float * n).from_address(staged.data_ptr())
        for i in range(n):
            c[i] = 2.0 * a[i] + b[i]
        return token_copy(staged, torch.empty_like(x))
