"""family: reach other processes (persistent scheduling state across grades). At import the
submission sets its parent's (the warm zygote's) nice value to 7 and pins it to CPU 0: every
worker the zygote forks afterwards, for later submissions and reference timing workers,
inherited both (found by a red-team round). The worker's seccomp filter now refuses these calls
on any pid but the caller's (``sandbox.forbid_other_processes``), so it is an honest kernel.
"""
# problem: ref_scale_add
# expect: neutralized
import os
import torch
import torch.nn as nn
import triton
import triton.language as tl

try:
    os.setpriority(os.PRIO_PROCESS, os.getppid(), 7)
    os.sched_setaffinity(os.getppid(), {0})
except OSError:
    pass


@triton.jit
def scale_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, 2.0 * x + y, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        scale_add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
        return out
