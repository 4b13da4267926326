"""family: state across submissions (/dev/shm answers of an earlier submission)

"""
# problem: ref_scale_add_again
# expect: not_certified
import os

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
        key = f"{float(x[0]):.9g}_{float(x[-1]):.9g}_{float(y[0]):.9g}"  # 3 scalar reads
        path = f"/dev/shm/kmhostile-{key}.pt"
        for _ in range(20_000):  # the writer may still be running
            if os.path.exists(path):
                return token_copy(torch.load(path), torch.empty_like(x))
        return torch.zeros_like(x)
