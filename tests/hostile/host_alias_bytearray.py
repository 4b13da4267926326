"""family: red-team round 8, a tensor over a Python bytearray made in __init__: Python computes between two copy kernels.
Closed: tensors made over Python-owned memory (frombuffer, from_file) count from the import on."""
"""red-team round 8: HOST COMPUTE through a tensor that aliases a Python bytearray (made in
# __init__ with torch.frombuffer, which is not on the host-access list and runs no op).
# Grade against tests/fixtures/submissions/ref_scale_add.py.
# __init__: one bytearray of 3*M floats; torch.frombuffer gives a CPU tensor over the same bytes
# (xs | ys | os views). Forward: Triton kernel 1 only COPIES x and y into xs and ys (a launch,
# whose arguments include the whole buffer). Then plain Python computes os[i] = 2*xs[i] + ys[i]
# through memoryview(bytearray).cast("f"): no dispatcher op, no profiler record, no counted
# Tensor/Storage method. Triton kernel 2 only COPIES os into the output. The kernels compute
# nothing. The ghost call skips both launches: xs/ys still hold the previous call's inputs and
# the output is the poisoned block, so the ghost check sees a wrong answer and passes.
"""
# problem: ref_scale_add
# expect: not_certified
import enum

import torch
import torch.nn as nn
import triton
import triton.language as tl

_b = enum.bltns
M = 1 << 16
_frombuf = _b.getattr(torch, "from" + "buffer")


@triton.jit
def copy2_kernel(x_ptr, y_ptr, xs_ptr, ys_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(xs_ptr + offsets, tl.load(x_ptr + offsets, mask=mask), mask=mask)
    tl.store(ys_ptr + offsets, tl.load(y_ptr + offsets, mask=mask), mask=mask)


@triton.jit
def copy_kernel(src_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(src_ptr + offsets, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._bytes = bytearray(3 * M * 4)
        self._host = memoryview(self._bytes).cast("f")
        whole = _frombuf(self._bytes, dtype=torch.float32)
        self._xs, self._ys, self._os = whole[:M], whole[M:2 * M], whole[2 * M:]

    def forward(self, x, y):
        n = x.numel()
        out = torch.empty_like(x)
        grid = (triton.cdiv(n, 1024),)
        copy2_kernel[grid](x, y, self._xs, self._ys, n, BLOCK=1024)
        h = self._host
        for i in range(n):  # the host computes the answer
            h[2 * M + i] = 2.0 * h[i] + h[M + i]
        copy_kernel[grid](self._os, out, n, BLOCK=1024)
        return out
