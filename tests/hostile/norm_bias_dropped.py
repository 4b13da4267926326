"""family: specialized to the constructor's state (layer norm that scales by its weight and
drops the bias, zero as constructed: wrong under every re-drawn state, and not the
constructor's answer either)
"""
# problem: ref_layer_norm
# expect: incorrect
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def layer_norm_kernel(x_ptr, w_ptr, out_ptr, cols, stride, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offsets = tl.arange(0, BLOCK)
    mask = offsets < cols
    x = tl.load(x_ptr + row * stride + offsets, mask=mask, other=0.0)
    mean = tl.sum(x, axis=0) / cols
    centred = tl.where(mask, x - mean, 0.0)
    var = tl.sum(centred * centred, axis=0) / cols
    w = tl.load(w_ptr + offsets, mask=mask, other=0.0)
    tl.store(out_ptr + row * stride + offsets, centred / tl.sqrt(var + eps) * w, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, cols):
        super().__init__()
        self.norm = nn.LayerNorm(cols)

    def forward(self, x):
        x = x.contiguous()
        rows, cols = x.shape
        out = torch.empty_like(x)
        layer_norm_kernel[(rows,)](x, self.norm.weight, out, cols, x.stride(0), self.norm.eps,
                                   BLOCK=triton.next_power_of_2(cols))
        return out
