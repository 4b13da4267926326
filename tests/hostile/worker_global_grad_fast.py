"""family: red-team round 9, forged speed: a counted Triton launch that never runs (a pre-run hook aborts it) plus the one-shot worker-global rebinding that computes the answer after the observed ranges.
Closed: a Triton launch counts once it ran, and the worker's globals are private (see worker_global_grad)."""
# worker_global_grad_fast: as worker_global_grad, but the launch is cut short: the harness counts
# a launch at the entry of its run wrapper, and the kernel's own pre-run hook (candidate code,
# called by the interpreter before it patches the language) raises, so no interpreted program
# runs. Timed calls cost only the wrapper, while the answer comes from torch.add run from
# invoke's finally (one-shot rebinding of the worker module's _set_grad_enabled).
# worker_global_grad: PyTorch computes the answer after the observed ranges, through a
# one-shot rebinding of the WORKER MODULE's own global `_set_grad_enabled` (round 8's fix bound
# it at import, but `_Run.invoke`'s `finally` still looks the name up in the worker's globals at
# call time). Forward zero-fills with Triton, then sets worker._set_grad_enabled to a function
# that restores the original, runs torch.add(y, x, alpha=2, out=out), then applies the mode.
# It runs after the tracer, the witness range and the `kernelmill.call -1` event. The patch
# snapshot of kernelmill's modules is compared only at timing reports and at the end.
# problem: ref_scale_add
# expect: not_certified
import enum

import torch
import torch.nn as nn
import triton
import triton.language as tl

_b = enum.bltns
_sys = _b.__import__("s" + "ys")
_audit = _sys.audit
_NAME = "_set_grad" + "_enabled"


def _worker():
    return _b.getattr(_sys, "mod" + "ules")["kernel" + "mill.grade.worker"]


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
    w = _worker()
    original = _b.getattr(w, _NAME)

    def once(mode):
        _b.setattr(w, _NAME, original)  # restored before anything checks
        torch.add(y, x, alpha=2.0, out=out)
        return original(mode)

    _b.setattr(w, _NAME, once)


class _Cut(Exception):
    pass


def _abort(*args, **kwargs):
    raise _Cut()


fill_kernel.add_pre_run_hook(_abort)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        before = _ghosted()
        try:
            fill_kernel[(triton.cdiv(n, 1024),)](out, n, BLOCK=1024)
        except _Cut:
            pass
        if _ghosted() == before:
            _arm(x, y, out)
        return out
