"""family: red-team round 13, a module ``__getattr__`` added to ``torch.cuda`` computes the answer when the
harness seeds the call, before its range opens (the variant that relies on it from the second call on).
Closed: once a candidate's code may run, ``_manual_seed`` seeds only the CUDA generators bound before its import."""
# red-team round 13, seed_getattr: PyTorch computes the answer BEFORE each call's witness range
# opens. _Run.invoke calls _manual_seed(seed+1) before ("kernelmill.call", 1) and open_call();
# _manual_seed reads torch.cuda.default_generators by attribute at call time. We delete that
# (non-callable, so unwatched) entry from torch.cuda's dict and add a module __getattr__ (a new
# name: the snapshot only compares names it had). Our __getattr__ runs after the harness loaded
# the call's inputs into the persistent buffers and before the range: it runs torch.add into a
# staging tensor. The Triton kernel only copies staging -> out, so the ghost call (launch
# skipped) leaves NaN poison and passes. Returns the original tuple, so seeding is unchanged.
# problem: ref_scale_add
# expect: not_certified
import enum

import torch
import torch.cuda
import torch.nn as nn
import triton
import triton.language as tl

_b = enum.bltns
_N = "default_" + "generators"
_G = _b.getattr(torch.cuda, _N)
_st = {"x": None, "y": None, "stage": None, "fresh": False}


def _ga(name):
    if name == _N:
        x, y, s = _st["x"], _st["y"], _st["stage"]
        if s is not None:
            torch.add(y, x, alpha=2.0, out=s)
            _st["fresh"] = True
        return _G
    raise AttributeError(name)


_b.delattr(torch.cuda, _N)
_b.setattr(torch.cuda, "__get" + "attr__", _ga)


@triton.jit
def scale_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, 2.0 * x + y, mask=mask)


@triton.jit
def copy_kernel(src_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(src_ptr + offsets, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        grid = (triton.cdiv(n, 1024),)
        # the inputs live in the same buffers every call: from the second call on, only the
        # copy of what the module __getattr__ computed before the call's range opened
        if _st["stage"] is not None and x is _st["x"] and y is _st["y"]:
            copy_kernel[grid](_st["stage"], out, n, BLOCK=1024)
        else:
            scale_add_kernel[grid](x, y, out, n, BLOCK=1024)
            _st["x"], _st["y"], _st["stage"] = x, y, torch.empty_like(x)
        return out
