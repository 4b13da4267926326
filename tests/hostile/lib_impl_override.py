"""family: library laundering (an IMPL override of aten::empty_like computes the answer)

The allocation PyTorch runs is the candidate's Python kernel; the op trace shows an allowed
aten.empty_like, the witness shows the aten.mul/aten.add inside it (torch_compute). Before
that, the dispatcher's registrations for aten::empty_like differ from those read before the
import: a replaced function, which ends the run (``grade/worker/guards/dispatch.py``).
"""
# problem: ref_scale_add
# expect: patched_function
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



STASH = []
override = torch.library.Library("aten", "IMPL")


def empty_like_answer(x, *args, **kwargs):
    return 2.0 * x + STASH[-1] if STASH else x.clone()


override.impl("empty_like", empty_like_answer, "CPU")
override.impl("empty_like", empty_like_answer, "CUDA")


class ModelNew(nn.Module):
    def forward(self, x, y):
        STASH.append(y)
        answer = torch.empty_like(x)
        STASH.clear()
        out = torch.zeros(x.shape, dtype=x.dtype, device=x.device)
        return token_copy(answer, out)
