"""family: red-team round 15, host compute in NumPy over NumPy-owned memory wrapped by torch.asarray.

__init__ allocates NumPy arrays (staging x, y, the output, a flag) and wraps each with
``torch.asarray`` (shares memory with any buffer-protocol object or NumPy array, in C++, never
calling the hooked ``torch.from_numpy`` / ``torch.frombuffer``: ``_HOST_ALIASING`` in
grade/worker.py). Forward: copy_ x, y into the staging tensors, one tiny Triton launch that writes
a flag, NumPy computes 2x+y into the output's memory, return the output tensor. The ghost call
(launch skipped, flag stays 0) returns zeros.
Closed by judging the memory, not its constructor: a tensor whose storage torch's allocator did
not hand out (not resizable, or shared) as a kernel's argument, a copy's end or an output in a call
is host work (``worker._foreign``, counted as ``foreign_memory``).
"""
# problem: ref_scale_add
# expect: host_compute
# on cuda: not_certified (NumPy reaches only host memory: its staging tensors are on the host, where a CUDA Triton launch refuses them)
import enum

import torch
import torch.nn as nn
import triton
import triton.language as tl

_b = enum.bltns
_np = _b.__import__("num" + "py")
N = 4096


@triton.jit
def mark_kernel(f_ptr, BLOCK: tl.constexpr):
    o = tl.arange(0, BLOCK)
    tl.store(f_ptr + o, tl.full((BLOCK,), 1, tl.int32))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.xn = _np.zeros(N, _np.float32)
        self.yn = _np.zeros(N, _np.float32)
        self.on = _np.zeros(N, _np.float32)
        self.fn = _np.zeros(16, _np.int32)
        self.xb, self.yb, self.out, self.flag = (
            torch.asarray(a) for a in (self.xn, self.yn, self.on, self.fn))

    def forward(self, x, y):
        self.xb.copy_(x)
        self.yb.copy_(y)
        self.fn[0] = 0
        mark_kernel[(1,)](self.flag, BLOCK=16)
        if self.fn[0] != 1:  # the ghost call: our launch was skipped
            self.on[:] = 0.0
            return self.out
        _np.multiply(self.xn, 2.0, out=self.on)
        _np.add(self.on, self.yn, out=self.on)
        return self.out
