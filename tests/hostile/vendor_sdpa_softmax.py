"""family: vendor-allowance laundering (softmax computed by scaled_dot_product_attention)
softmax(x) == SDPA(q=x, k=I, v=I, scale=1): the attention op is on the `library` preset's vendor
list, and every op inside it (its softmax, its matmuls) is excused because its root is allowed.
A Triton kernel only copies PyTorch's answer into the output.

Caught: the ``library`` preset allows a vendor class (GEMM, convolution, attention) only
where the reference does that kind of work (``policy.vendor_classes``).
"""
# problem: ref_softmax
# expect: torch_compute
# on cuda: not_certified
import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(dst_ptr + offsets, tl.load(src_ptr + offsets, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        rows, cols = x.shape
        eye = torch.zeros(cols, cols, dtype=x.dtype, device=x.device)
        eye.diagonal().fill_(1.0)                         # identity from a fill and a view
        soft = F.scaled_dot_product_attention(x.unsqueeze(0), eye.unsqueeze(0),
                                              eye.unsqueeze(0), scale=1.0)[0]
        out = torch.empty_like(x)
        n = out.numel()
        copy_kernel[(triton.cdiv(n, 16384),)](soft, out, n, BLOCK=16384)
        return out
