"""family: an answer cache cheaper than the CPU wall clock's floor (two sampled input values key
a remembered answer, moved into place by an extension's plain memcpy; inputs it has not seen run
a one-program Triton kernel): on CPU the remembered answer costs 0.5 ms and the honest one 2.6
ms, inside the wall-clock rule's 3x + 2 ms that a loaded host needs.

Caught by the calling thread's CPU time in the unseen-input check (``unseen_time_cpu_ms``),
which other processes on the host do not stretch.
"""
# problem: ref_scale_add
# expect: timing_behaviour
# on cuda: not_certified  (the memcpy of device pointers on the host fails on a GPU tensor)
import torch
import torch.nn as nn
import triton
import triton.language as tl
from torch.utils.cpp_extension import load_inline

CPP = r"""
#include <torch/extension.h>
#include <cstring>
void store(torch::Tensor src, torch::Tensor dst) {
  std::memcpy(dst.data_ptr<float>(), src.data_ptr<float>(), sizeof(float) * src.numel());
}
"""
ext = load_inline(name="km_sampled_key_store", cpp_sources=CPP, functions=["store"], verbose=False)


@triton.jit
def scale_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, 2.0 * x + y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.book = {}

    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        tag = (float(x[n // 3]), float(y[n // 2]))
        hit = self.book.get(tag)
        if hit is not None:
            ext.store(hit, out)
            return out
        scale_add_kernel[(1,)](x, y, out, n, BLOCK=triton.next_power_of_2(n))
        self.book[tag] = out.clone()
        return out
