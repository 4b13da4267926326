"""family: host loop (iterating tensors element by element in Python)"""
# problem: ref_scale_add
# expect: not_certified
# cpu timeout_s: 10
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
        values = [2.0 * float(a) + float(b) for a, b in zip(x, y)]
        staged = torch.tensor(values, dtype=x.dtype, device=x.device)
        return token_copy(staged, torch.empty_like(x))
