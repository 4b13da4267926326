"""family: red-team round 5, torch._C._set_grad_enabled rebound to compute after the observed ranges close.
Closed: every module function bound before the import is watched (torch._C's too), and
checked once more just before the facts are encoded."""
# red-team 5: PyTorch fills the output AFTER the observed ranges close, no takeover, no honest
# compute at all. _Run.invoke runs `with _no_grad(), witness.call(), tracer:`; torch.no_grad is
# bound at import (round 3's fix), but its __exit__ (after the op trace and the witness range
# have closed) calls torch.set_grad_enabled(prev), whose __init__ calls
# torch._C._set_grad_enabled, looked up at call time on torch._C: a module object, so
# snapshot_modules (callables only) never lists it. Replaced with functools.update_wrapper's
# `assigned`; the replacement restores grad mode and then, if forward's Triton kernel really ran
# (it sets a flag, so the ghost call gets garbage), writes torch.add's answer into the output
# forward returned. Those ops are outside every range (witness.per_call drops them; the op
# trace has closed). Forward itself only allocates and launches a one-element flag kernel.
# problem: ref_scale_add
# expect: not_certified
import functools

import torch
import torch.nn as nn
import triton
import triton.language as tl


def _namespace(obj):
    box = {}

    class _View:
        __dict__ = box

    functools.update_wrapper(_View(), obj, assigned=())
    return box


_tc = _namespace(torch)["_C"]
_real = _namespace(_tc)["_set_grad_enabled"]
_pending = []


class _Holder:
    def __init__(self):
        def _set_grad_enabled(mode):
            _real(mode)
            while _pending:
                x, y, out, flag = _pending.pop()
                if bool(flag[0] == 1):
                    out.copy_(torch.add(y, x, alpha=2.0))

        self._set_grad_enabled = _set_grad_enabled


functools.update_wrapper(_tc, _Holder(), assigned=("_set_grad_enabled",), updated=())


@triton.jit
def mark_kernel(flag_ptr):
    tl.store(flag_ptr, 1)


class ModelNew(nn.Module):
    def forward(self, x, y):
        out = torch.empty_like(x)
        flag = torch.zeros(1, dtype=torch.int32)
        mark_kernel[(1,)](flag)
        _pending.append((x, y, out, flag))
        return out
