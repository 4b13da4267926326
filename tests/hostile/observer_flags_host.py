"""family: red-team round 6, the observers' module-level flags cleared in place, host compute unseen.
Closed: the observers' state lives in the sealed audit hook; the flags are gone from the module."""
# red-team 6: the worker's OBSERVATION FLAGS mutated in place (no hook disabled, no frame, no
# function rebound). Grade against tests/fixtures/submissions/ref_scale_add.py.
# grade.worker keeps `_active = [False]` (a candidate call is in progress: gates the host-access
# counters and the Triton launch counter) and `_ghost = [False]` (the ghost call: launches are
# skipped). Both are module-level lists, mutated in place, not callable, so snapshot_modules and
# the result guard never see a change. The module is reached by name (enum.bltns.__import__ with a
# split string; the audit hook refuses no import event). Forward launches a Triton kernel that only
# zero-fills the output (counted: a launch, with the output as its argument), then clears
# _active[0] and computes 2x+y on the host, element by element, with Tensor.map2_ (no dispatcher
# op, no profiler record; its host-access hook counts only while _active[0] is true), then sets
# _active[0] back. In the ghost call (it reads _ghost[0]) it skips the host work, so the skipped
# launch leaves garbage as an honest kernel would. The kernel computes nothing.
# problem: ref_scale_add
# expect: not_certified
import enum

import torch
import torch.nn as nn
import triton
import triton.language as tl

_b = enum.bltns
_wm = _b.__import__("kernel" + "mill.grade.worker", None, None, ["x"])
_act = _b.getattr(_wm, "_act" + "ive")
_gho = _b.getattr(_wm, "_gho" + "st")


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
        if _gho[0]:
            return out  # the ghost call: as if the kernel had not run
        was = _act[0]
        _act[0] = False
        try:
            out.map2_(x, y, _f)
        finally:
            _act[0] = was
        return out
