"""family: honest (layer norm with parameters of its own names: the state loads by order)."""
# problem: ref_layer_norm
# expect: certified
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def layer_norm_kernel(x_ptr, w_ptr, b_ptr, out_ptr, cols, stride, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offsets = tl.arange(0, BLOCK)
    mask = offsets < cols
    x = tl.load(x_ptr + row * stride + offsets, mask=mask, other=0.0)
    mean = tl.sum(x, axis=0) / cols
    centred = tl.where(mask, x - mean, 0.0)
    var = tl.sum(centred * centred, axis=0) / cols
    w = tl.load(w_ptr + offsets, mask=mask, other=0.0)
    b = tl.load(b_ptr + offsets, mask=mask, other=0.0)
    y = centred / tl.sqrt(var + eps) * w + b
    tl.store(out_ptr + row * stride + offsets, y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, cols):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(cols))
        self.bias = nn.Parameter(torch.zeros(cols))
        self.eps = 1e-5

    def forward(self, x):
        x = x.contiguous()
        rows, cols = x.shape
        out = torch.empty_like(x)
        layer_norm_kernel[(rows,)](x, self.weight, self.bias, out, cols, x.stride(0),
                                   self.eps, BLOCK=triton.next_power_of_2(cols))
        return out
