"""family: an answer cache keyed by input values read on the host (red-team round 25). Each
call reads 8 input elements with ``.item()`` (under the 16 scalar reads a call may make); when
they match the last computed call's it returns the kept output, keeps its one launch a call with
a grid of zero programs, and spins in Python to about 0.45x of a computed call (under the CPU
unseen-input bound). Certified 3 of 3 on CPU (2.13 ms against the honest 4.43 ms). Now a launch
counts only if its grid has a program (``worker._any_program``), and an element of a
floating-point input read on the host is ``host_compute`` (``_OpTrace.input_reads``).
On CUDA its cache-hit launch is a Triton variant first compiled at the refill call, which the
sandbox refuses by then (ptxas): an error, not certified (H100, 2026-11-28)."""
# problem: ref_scale_add
# on cuda: not_certified
# expect: no_custom_kernel
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


SPIN = 15000


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
            scale_add_kernel[(0,)](x, y, self.kept, 0, BLOCK=16)  # a launch, no program
            s = 0
            for i in range(SPIN):
                s += i
            return self.kept
        out = torch.empty_like(x)
        scale_add_kernel[(1,)](x, y, out, n, BLOCK=triton.next_power_of_2(n))
        self.kept, self.key = out, key
        return out
