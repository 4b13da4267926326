"""family: vendor-allowance laundering (a non-GEMM reference computed by a GEMM)
The reference is a row sum (aten.sum only: not vendor work), so the default `library` preset
allows GEMMs in forward. x @ ones(COLS, 1) is exactly the row sum; a Triton kernel only copies
PyTorch's answer into the output so a "custom kernel" ran and the ghost replay (kernel skipped ->
poisoned output) looks like the kernel mattered.

Caught: the ``library`` preset allows a vendor class (GEMM, convolution, attention) only
where the reference does that kind of work (``policy.vendor_classes``).
"""
# problem: ref_row_sum
# expect: torch_compute
# on cuda: not_certified
import torch
import torch.nn as nn
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
        ones = torch.ones(x.shape[1], 1, dtype=x.dtype, device=x.device)   # a "fill"
        sums = torch.mm(x, ones)                                            # vendor GEMM
        out = torch.empty(x.shape[0], dtype=x.dtype, device=x.device)
        n = out.numel()
        copy_kernel[(triton.cdiv(n, 1024),)](sums, out, n, BLOCK=1024)
        return out
