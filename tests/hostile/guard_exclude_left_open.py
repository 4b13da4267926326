"""family: trace switched off (guard entered at import and never left)

"""
# problem: ref_scale_add
# expect: torch_compute
import torch
import torch.nn as nn
from torch._C import DispatchKey, DispatchKeySet, _ExcludeDispatchKeyGuard
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

_guard = None


class ModelNew(nn.Module):
    def forward(self, x, y):
        global _guard
        if _guard is None:
            _guard = _ExcludeDispatchKeyGuard(DispatchKeySet(DispatchKey.Python))
            _guard.__enter__()
        return token_copy(2.0 * x + y, torch.empty_like(x))
