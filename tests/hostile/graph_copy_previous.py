"""family: a captured call copies the previous captured call's output instead of computing its
own (GPU graph timing). Within one replay of the timing graph every call reads the same input
buffers, so the answer a call computed stays right for the calls after it. Eager calls (every
checked call, the ghost call) run the honest kernel. In a capture the first call computes; each
later call of the same capture launches a copy kernel from the output before it: every held
output is right on any inputs and agrees with the last (``measure.calls_disagree`` passes), one
launch per call as the checked calls. A copy moves 2 of the 3 tensors' bytes the kernel moves:
each scored call does about 2/3 of the honest device work, above the judge's device-work ratio
(``judge.DEVICE_WORK_RATIO``). A new capture is told by its first allocation: within one
capture, with every output held, a call's output lands just past the one before (in the same
segment, or in the next one the allocator maps).
On CPU there is no capture: this file is honest there."""
# problem: ref_scale_add_big
# expect: certified
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


@triton.jit
def copy_kernel(src_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(src_ptr + offsets, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.previous = None

    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        grid = (triton.cdiv(n, 1024),)
        capturing = x.is_cuda and torch.cuda.is_current_stream_capturing()
        before = self.previous
        same_capture = capturing and before is not None and \
            0 < out.data_ptr() - before.data_ptr() <= 4 * before.numel() * before.element_size()
        if same_capture:
            copy_kernel[grid](before, out, n, BLOCK=1024)
        else:
            scale_add_kernel[grid](x, y, out, n, BLOCK=1024)
        self.previous = out if capturing else None
        return out
