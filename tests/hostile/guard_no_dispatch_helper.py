"""family: trace switched off (a public helper, no_dispatch, that enters the dispatch-disabling guard)

"""
# problem: ref_scale_add
# expect: torch_compute
import torch
import torch.nn as nn
from torch.utils._mode_utils import no_dispatch
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
        with no_dispatch():
            answer = 2.0 * x + y
        return token_copy(answer, torch.empty_like(x))
