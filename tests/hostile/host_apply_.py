"""family: host loop (Tensor.apply_ on a scratch copy, answer moved by a kernel)

"""
# problem: ref_row_sum
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
    def forward(self, x):
        rows, cols = x.shape
        acc = torch.zeros(rows, dtype=x.dtype, device=x.device)
        for j in range(cols):
            column = torch.empty(rows, dtype=x.dtype, device=x.device)
            token_copy(x[:, j].contiguous(), column)
            acc.map_(column, lambda a, b: a + b)
        total = torch.empty_like(acc)
        return token_copy(acc, total)
