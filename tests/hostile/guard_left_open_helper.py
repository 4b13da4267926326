"""family: trace switched off (the no_dispatch helper entered in forward and never left)

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


_guard = []


class ModelNew(nn.Module):
    def forward(self, x, y):
        if not _guard:  # entered once, never left: every later op is out of the trace's sight
            _guard.append(no_dispatch())
            _guard[0].__enter__()
        return token_copy(2.0 * x + y, torch.empty_like(x))
