"""family: library laundering (a new op defined inside the aten namespace)

An op named aten.km_copy_like looks like a PyTorch op whose name is not on any list.
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

frag = torch.library.Library("aten", "FRAGMENT")
frag.define("km_copy_like(Tensor x, Tensor y) -> Tensor")
frag.impl("km_copy_like", lambda x, y: x * 2.0 + y, "CPU")
frag.impl("km_copy_like", lambda x, y: x * 2.0 + y, "CUDA")


class ModelNew(nn.Module):
    def forward(self, x, y):
        return token_copy(torch.ops.aten.km_copy_like(x, y), torch.empty_like(x))
