"""family: specialized to the state it was shown last (layer norm whose affine step runs only
in the first call after its weight changed, read from the weight's version counter: a loaded
state is computed with once, then the norm alone is returned)
"""
# problem: ref_layer_norm
# expect: not_general
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def layer_norm_kernel(x_ptr, w_ptr, b_ptr, out_ptr, cols, stride, eps, AFFINE: tl.constexpr,
                      BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offsets = tl.arange(0, BLOCK)
    mask = offsets < cols
    x = tl.load(x_ptr + row * stride + offsets, mask=mask, other=0.0)
    mean = tl.sum(x, axis=0) / cols
    centred = tl.where(mask, x - mean, 0.0)
    var = tl.sum(centred * centred, axis=0) / cols
    y = centred / tl.sqrt(var + eps)
    if AFFINE:
        w = tl.load(w_ptr + offsets, mask=mask, other=0.0)
        b = tl.load(b_ptr + offsets, mask=mask, other=0.0)
        y = y * w + b
    tl.store(out_ptr + row * stride + offsets, y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, cols):
        super().__init__()
        self.norm = nn.LayerNorm(cols)
        self.seen = None

    def forward(self, x):
        version = (self.norm.weight._version, self.norm.bias._version)
        first = self.seen is None
        changed, self.seen = version != self.seen, version
        x = x.contiguous()
        rows, cols = x.shape
        out = torch.empty_like(x)
        if first:  # both variants compile in the first call (on CUDA no process, and so no
            # compiler, may start in a later one): the one without the affine step into scratch
            layer_norm_kernel[(rows,)](x, self.norm.weight, self.norm.bias, torch.empty_like(x),
                                       cols, x.stride(0), self.norm.eps, AFFINE=False,
                                       BLOCK=triton.next_power_of_2(cols))
        layer_norm_kernel[(rows,)](x, self.norm.weight, self.norm.bias, out, cols, x.stride(0),
                                   self.norm.eps, AFFINE=changed,
                                   BLOCK=triton.next_power_of_2(cols))
        return out
