"""family: red-team round 8, torch.set_grad_enabled rebound for one call: no_grad's exit computes after the observed ranges.
Closed: gradients set around the ranges by the C calls bound at import."""
# red-team round 8: PYTORCH COMPUTES THE ANSWER after the observed ranges close, through a
# TRANSIENT rebinding of a watched torch function (time of check vs time of use).
# Grade against tests/fixtures/submissions/ref_scale_add.py.
# _Run.invoke runs `with _no_grad(), self.witness.call(), tracer:`; no_grad.__exit__ runs last
# (after the tracer and the witness's FORWARD range closed) and calls torch.set_grad_enabled,
# looked up on the torch module at call time. Forward launches a Triton kernel that only
# zero-fills the output, then rebinds torch.set_grad_enabled (a module setattr: no audit event)
# to a one-shot function that RESTORES the original at once, runs torch.add(y, x, alpha=2,
# out=out) and then applies the grad mode. The op trace is gone, the witness drops ops outside
# every call range, and the patch snapshot is compared only at timing reports (kernelmill and
# builtins entries only) and at the end, when the original is back. In the ghost call (told by
# the sealed hook's `kernelmill.read` answer, `ghosted`) forward does not arm the rebinding.
# problem: ref_scale_add
# expect: not_certified
import enum

import torch
import torch.nn as nn
import triton
import triton.language as tl

_b = enum.bltns
_audit = _b.__import__("s" + "ys").audit
_NAME = "set_grad" + "_enabled"


@triton.jit
def fill_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.zeros([BLOCK], dtype=tl.float32), mask=mask)


def _ghosted():
    box = []
    _audit("kernel" + "mill.read", box)
    return box[0].get("ghosted", 0) if box else 0


def _arm(x, y, out):
    original = _b.getattr(torch, _NAME)

    def once(mode):
        _b.setattr(torch, _NAME, original)  # restored before anything checks
        torch.add(y, x, alpha=2.0, out=out)
        return original(mode)

    _b.setattr(torch, _NAME, once)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        before = _ghosted()
        fill_kernel[(triton.cdiv(n, 1024),)](out, n, BLOCK=1024)
        if _ghosted() == before:
            _arm(x, y, out)
        return out
