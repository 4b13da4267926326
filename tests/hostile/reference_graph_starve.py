"""family: starving the reference's timing graph of device memory (the review of the reference
pool, M5). The kernel is honest (2x+y in Triton). In ``__init__`` it takes all but 1 GiB of the
GPU's free memory and holds it through its checked calls, while the kept reference worker
prepares its timer beside them: the reference's graph capture (a private pool, new device
memory) fails and the reference is timed call by call with events, every launch counted,
against the candidate's graph (4,096 elements: a launch is most of a call). The forward lets
the memory go on its first call on a stream of the timer's own (its warm-up before the
capture), so its own graph is captured. Closed: such a window is a failed one, with no
speedup, graded again alone where it shared the GPU (``checks/timing.reference_starved``).
``fair_timing``: no speedup against a reference whose graph failed for want of memory while
the candidate's was captured. On CPU there is no device memory to take (neutralized)."""
# problem: ref_scale_add
# expect: neutralized
# on cuda: fair_timing
# cuda timeout_s: 120
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


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.hog = None
        if torch.cuda.is_available():
            free, _total = torch.cuda.mem_get_info()
            if free > 2 << 30:
                self.hog = torch.empty(free - (1 << 30), dtype=torch.uint8, device="cuda")

    def forward(self, x, y):
        if self.hog is not None and x.is_cuda and \
                torch.cuda.current_stream() != torch.cuda.default_stream():
            self.hog = None  # the timer's own stream: let the memory go before its capture
            torch.cuda.empty_cache()
        out = torch.empty_like(x)
        n = x.numel()
        scale_add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
        return out
