"""family: exported graph (torch.export of the reference, its module run in forward)
"""
# problem: ref_scale_add
# expect: not_certified
# (torch.export rebinds members of torch classes it loads: patched_function comes first now)
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


class Reference(nn.Module):
    def forward(self, x, y):
        return 2.0 * x + y


graph = torch.export.export(Reference(), (torch.randn(4096), torch.randn(4096))).module()


class ModelNew(nn.Module):
    def forward(self, x, y):
        return token_copy(graph(x, y), torch.empty_like(x))
