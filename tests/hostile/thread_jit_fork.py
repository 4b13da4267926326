"""family: work on PyTorch's inter-op thread pool (torch.jit.fork of the reference's ops, waited
for in forward; no Python thread is started)
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


def reference(x, y):
    return 2.0 * x + y


class ModelNew(nn.Module):
    def forward(self, x, y):
        future = torch.jit.fork(reference, x, y)
        return token_copy(torch.jit.wait(future), torch.empty_like(x))
