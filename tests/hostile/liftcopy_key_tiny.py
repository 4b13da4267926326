"""family: an answer cache keyed by input values read on the host through
``aten.lift_fresh_copy`` (red-team round 27, against round 26's copy rule): an allowed copy op
(``core.taxonomy.COPY_OPS``) that is missing from the worker's ``_COPY_OPS``, so what it wrote
is not watched and its elements' ``.item()`` is no input read. A hit launches one program
of a tiny kernel on a tiny buffer of its own, every element masked off (a launch that counts),
spins, and returns the kept output (the call before's output: poisoned before ghost_seen, so
the ghost sees it wrong)."""
# problem: ref_scale_add
# expect: not_certified
# on cuda: not_certified (H200, 2026-11-28: an error in the refill call, where the hit's
# kernel first compiles and its ptxas is refused, as no process may start after call 1)
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def touch_kernel(p_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(p_ptr + offsets, tl.load(p_ptr + offsets, mask=offsets < n), mask=offsets < n)


@triton.jit
def scale_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, 2.0 * x + y, mask=mask)


SPIN = 25000
SAMPLES = 6


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.kept = None
        self.key = None
        self.kbuf = torch.zeros(SAMPLES, dtype=torch.float32)

    def forward(self, x, y):
        n = x.numel()
        step = max(1, n // (SAMPLES // 2))
        kx = torch.ops.aten.lift_fresh_copy(x[7::step])
        ky = torch.ops.aten.lift_fresh_copy(y[7::step])
        key = tuple(k[i].item() for k in (kx, ky) for i in range(min(SAMPLES // 2, k.numel())))
        if self.kept is not None and key == self.key and self.kept.shape == x.shape:
            touch_kernel[(1,)](self.kbuf, 0, BLOCK=2)  # one program, a tiny argument, masked off
            s = 0
            for i in range(SPIN):
                s += i
            return self.kept
        out = torch.empty_like(x)
        scale_add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
        self.kept, self.key = out, key
        return out
