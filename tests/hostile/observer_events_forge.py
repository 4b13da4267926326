"""family: red-team round 6's observer_flags_host against the sealed observers: the harness's
own events forged (closing the candidate call to compute on the host unseen).
Closed: the events that open or close a call count only from the harness's code objects."""
# Grade against tests/fixtures/submissions/ref_scale_add.py. The observers' state lives in the
# worker's sealed audit hook; the hooks report through sys.audit("kernelmill.*"). Forward launches
# a Triton kernel that only zero-fills the output, raises the event that ends a candidate call,
# computes 2x+y on the host (collections._sys.audit, the names split) with Tensor.map2_, and raises the event that opens one again. It reads
# the hook's counts (a copy) to tell the ghost call (its launch counted as ghosted) and skips the
# host work there. The kernel computes nothing of the answer.
# problem: ref_scale_add
# expect: not_certified
import collections

import torch
import torch.nn as nn
import triton
import triton.language as tl

_ghosted = [0]
_audit = collections._sys.audit
_PREFIX = "kernel" + "mill."


@triton.jit
def fill_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.zeros([BLOCK], dtype=tl.float32), mask=mask)


def _f(_o, a, b):
    return 2.0 * a + b


class ModelNew(nn.Module):
    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        fill_kernel[(triton.cdiv(n, 1024),)](out, n, BLOCK=1024)
        seen: list = []
        _audit(_PREFIX + "read", seen)
        if seen and seen[0]["ghosted"] > _ghosted[0]:
            _ghosted[0] = seen[0]["ghosted"]
            return out  # the ghost call: as if the kernel had not run
        _audit(_PREFIX + "call", -1, "")  # close the call the harness opened
        try:
            out.map2_(x, y, _f)
        finally:
            _audit(_PREFIX + "call", 1, "")
        return out
