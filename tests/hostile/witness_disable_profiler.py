"""family: trace switched off (the profiler behind the op witness stopped from inside forward)"""
# problem: ref_scale_add
# expect: trace_evaded
import torch
import torch.nn as nn
from torch._C._autograd import _disable_profiler
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


_stopped = []


class ModelNew(nn.Module):
    def forward(self, x, y):
        if not _stopped:
            _stopped.append(1)
            try:
                _disable_profiler()
            except RuntimeError:
                pass
        return token_copy(2.0 * x + y, torch.empty_like(x))
