"""family: an answer cache keyed by input values read on the host through a copy (red-team
round 26, against round 25's host-read rule): a clone of sampled input elements is new memory,
and reading its elements was not counted, a hit launched with a grid extent that is a 0-d tensor
worth 0 (no program ran, and the launch rule read only integer extents). Certified on CPU. Now
what a copy op writes from the inputs is watched like them (``worker._OpTrace``), and a grid
extent that is no integer does not count as a launch (``worker._any_program``).
On CUDA (not run there) the cache-hit launch is a Triton variant first compiled late."""
# problem: ref_scale_add
# expect: no_custom_kernel
# on cuda: not_certified
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
        self.zero = torch.zeros((), dtype=torch.int64)

    def forward(self, x, y):
        n = x.numel()
        step = max(1, n // 4)
        kx = x[::step].clone()
        ky = y[::step].clone()
        key = tuple(k[i].item() for k in (kx, ky) for i in range(k.numel()))[:8]
        if self.kept is not None and key == self.key and self.kept.shape == x.shape:
            scale_add_kernel[(self.zero,)](x, y, self.kept, n, BLOCK=16)  # no program runs
            s = 0
            for i in range(SPIN):
                s += i
            return self.kept
        out = torch.empty_like(x)
        scale_add_kernel[(1,)](x, y, out, n, BLOCK=triton.next_power_of_2(n))
        self.kept, self.key = out, key
        return out
