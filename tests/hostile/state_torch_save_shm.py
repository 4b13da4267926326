"""family: state across submissions (answers left in /dev/shm with torch.save, read back by
a later run whose inputs match)

Landlock makes /dev/shm unwritable for a worker: the save fails, the run stays honest.
"""
# problem: ref_scale_add
# expect: neutralized
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


@triton.jit
def scale_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, 2.0 * x + y, mask=mask)


def honest(x, y):
    out = torch.empty_like(x)
    n = x.numel()
    scale_add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
    return out


STORE = "/dev/shm/kmhostile-torch-save.pt"


class ModelNew(nn.Module):
    def forward(self, x, y):
        try:
            seen = torch.load(STORE)
            if torch.equal(seen["x"], x) and torch.equal(seen["y"], y):
                return token_copy(seen["out"], torch.empty_like(x))
        except (OSError, RuntimeError, KeyError):
            pass
        out = honest(x, y)
        try:
            torch.save({"x": x.clone(), "y": y.clone(), "out": out.clone()}, STORE)
        except (OSError, RuntimeError):
            pass
        return out
