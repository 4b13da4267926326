"""family: red-team round 6, an instance attribute (_op) of an op object the witness bound at import.
Closed: the witness binds the ops' C callables."""
# red-team 6: an INSTANCE ATTRIBUTE of an object the worker bound at import.
# Grade against tests/fixtures/submissions/ref_scale_add.py.
# Round 4/5 fixed "the range closes through an op looked up by name" by binding the OpOverload
# object at import (witness._range_exit = torch.ops.profiler._record_function_exit._RecordFunction).
# But calling that object runs TorchBindOpOverload.__call__, which calls `self._op(...)`: an
# instance attribute, set with a plain setattr (no audit event) and watched by nothing (the
# snapshot holds module bindings and a few classes' members, not objects' own dicts). The new
# _op closes the range for real, then -- for the first range exit after forward returned, i.e.
# the call's own witness range, after the op trace has closed -- writes torch.add(y, x, alpha=2)
# into the output forward returned, if forward's one-element Triton kernel really ran (a flag;
# the ghost call skips it and gets uninitialised memory). The ops are outside every range.
# problem: ref_scale_add
# expect: not_certified
import enum

import torch
import torch.nn as nn
import triton
import triton.language as tl

_b = enum.bltns
_exit_op = _b.getattr(_b.getattr(torch.ops.profiler, "_record_function_ex" + "it"),
                      "_Record" + "Function")
_real_op = _b.getattr(_exit_op, "_op")
_pending = []


def _op(*args, **kwargs):
    result = _real_op(*args, **kwargs)
    if _pending:
        out, x, y, flag = _pending.pop()
        if flag[0] == 1.0:
            torch.add(y, x, alpha=2.0, out=out)
    return result


_b.setattr(_exit_op, "_op", _op)


@triton.jit
def flag_kernel(flag_ptr):
    tl.store(flag_ptr, 1.0)


class ModelNew(nn.Module):
    def forward(self, x, y):
        out = torch.empty_like(x)
        flag = torch.zeros(1, device=x.device)
        flag_kernel[(1,)](flag)
        del _pending[:]
        _pending.append((out, x, y, flag))
        return out
