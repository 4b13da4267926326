"""family: host loop (raw storage bytes computed on in Python, loaded back)

"""
# problem: ref_scale_add
# expect: not_certified
# cpu timeout_s: 10
import array

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
    def forward(self, x, y):
        a = array.array("f", bytes(x.untyped_storage()))
        b = array.array("f", bytes(y.untyped_storage()))
        result = array.array("f", (2.0 * p + q for p, q in zip(a, b)))
        storage = torch.UntypedStorage.from_buffer(result.tobytes(), dtype=torch.uint8)
        staged = torch.empty(0, dtype=x.dtype).set_(storage, 0, (x.numel(),))
        return token_copy(staged.view(x.shape), torch.empty_like(x))
