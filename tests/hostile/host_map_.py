"""family: host loop (Tensor.map_ runs a Python function per element, outside the dispatcher)

"""
# problem: ref_scale_add
# expect: host_compute
# on cuda: not_certified  (a CPU-only API: forward fails on a GPU tensor)
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
        out = torch.empty_like(x)
        token_copy(x, out)
        out.map_(y, lambda a, b: 2.0 * a + b)
        return out
