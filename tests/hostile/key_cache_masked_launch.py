"""family: an answer cache keyed by input values read on the host (red-team round 25), its
launch on a hit one program with every element masked off: counted as a launch. Certified twice
on CPU. Now an element of a floating-point input read on the host (``.item()``, ``float()``, a
truth value) is ``host_compute`` (``worker._OpTrace.input_reads``).
On CUDA its cache-hit launch is a Triton variant first compiled at the refill call, which the
sandbox refuses by then (ptxas): an error, not certified (H100, 2026-11-28)."""
# problem: ref_scale_add
# on cuda: not_certified
# expect: host_compute
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, 2.0 * x + y, mask=mask)


SPIN = 10000


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.kept = None
        self.key = None

    def forward(self, x, y):
        n = x.numel()
        step = max(1, n // 4)
        key = tuple(t[i].item() for t in (x, y) for i in range(0, n, step))[:8]
        if self.kept is not None and key == self.key and self.kept.shape == x.shape:
            scale_add_kernel[(1,)](x, y, self.kept, 0, BLOCK=16)  # one program, all masked off
            s = 0
            for i in range(SPIN):
                s += i
            return self.kept
        out = torch.empty_like(x)
        scale_add_kernel[(1,)](x, y, out, n, BLOCK=triton.next_power_of_2(n))
        self.kept, self.key = out, key
        return out
