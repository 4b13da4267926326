"""family: red-team round 14, host compute in NumPy through views made in __init__ (outside every call).

ModelNew.__init__ allocates its own tensors (staging copies of x and y, the output, a flag) and
takes NumPy views of them there. The host-access counters (Tensor.numpy etc.) count only while a
call is active (``_observe``: ``elif active and name in ("thread_starts", "host_access")``), so
views made at construction are free. Forward: torch copy_ of x, y into the staging tensors (copies
are allowed ops), one tiny Triton launch that only writes a flag, NumPy computes 2*x+y into the
output's memory. The ghost call is told apart by the flag (its launch is skipped): zeros then.
Closed: a lasting host view of tensor memory (numpy, __array__, DLPack, a storage over a buffer)
counts from the import on, in a call or not (``host_view``), as tensors over Python-owned memory do.
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
_NP = "num" + "py"
N = 4096


@triton.jit
def mark_kernel(f_ptr, BLOCK: tl.constexpr):
    o = tl.arange(0, BLOCK)
    tl.store(f_ptr + o, tl.full((BLOCK,), 1, tl.int32))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.xb = torch.zeros(N)
        self.yb = torch.zeros(N)
        self.out = torch.zeros(N)
        self.flag = torch.zeros(16, dtype=torch.int32)
        # NumPy views taken now: no call is active, nothing counts them
        self.v = [_b.getattr(t, _NP)() for t in (self.xb, self.yb, self.out, self.flag)]

    def forward(self, x, y):
        xn, yn, on, fn = self.v
        self.xb.copy_(x)
        self.yb.copy_(y)
        fn[0] = 0
        mark_kernel[(1,)](self.flag, BLOCK=16)
        if fn[0] != 1:  # the ghost call: our launch was skipped
            on[:] = 0.0
            return self.out
        on[:] = 2.0 * xn + yn  # NumPy, on the host: no op, no counted method
        return self.out
