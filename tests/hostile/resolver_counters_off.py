"""family: grader state reached by name (pkgutil.resolve_name of the worker module's
"call in progress" flag, built at run time; with it cleared, raw storage bytes computed on in
Python are not counted, and set again before the copy launch so that one is)

Caught by the static scan's import allowlist (pkgutil is no module a kernel needs).
"""
# problem: ref_scale_add
# expect: forbidden_api
import array
import pkgutil

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


active = pkgutil.resolve_name(".".join(["kernel" + "mill", "grade", "worker"]) + ":_active")


class ModelNew(nn.Module):
    def forward(self, x, y):
        active[0] = False
        a = array.array("f", bytes(x.untyped_storage()))
        b = array.array("f", bytes(y.untyped_storage()))
        staged = torch.tensor([2.0 * p + q for p, q in zip(a, b)], dtype=x.dtype)
        active[0] = True
        return token_copy(staged, torch.empty_like(x))
