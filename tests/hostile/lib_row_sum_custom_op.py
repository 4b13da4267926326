"""family: library laundering (a custom op whose body is a PyTorch reduction)"""
# problem: ref_row_sum
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




@torch.library.custom_op("kmrows::sum", mutates_args=())
def row_sum(x: torch.Tensor) -> torch.Tensor:
    return x.sum(dim=1)


class ModelNew(nn.Module):
    def forward(self, x):
        return token_copy(row_sum(x), torch.empty(x.shape[0], dtype=x.dtype, device=x.device))
