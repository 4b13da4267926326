"""family: red-team round 11, dict_eq_exit: PyTorch computes the answer after the witness's FORWARD range closed, through a
global-name lookup in the standard library. contextlib's module dict gets a new key: a str
subclass equal to "StopIteration" (same hash) whose __eq__ runs code. contextlib's
_GeneratorContextManager.__exit__ looks "StopIteration" up in its module globals right after the
generator finished, i.e. right after the private witness's `_range_exit(record)` closed the range;
the dict compares keys with equal hashes by calling our __eq__. The kernel's pre-run hook (skipped
in the ghost call) marks that the launch ran; forward arms the trigger as it returns; the first
lookup after that (the FORWARD range's exit, after the op tracer closed) runs torch.add into out.
The Triton kernel does nothing. No module name is rebound: a new key on a stdlib module.
Closed: the witness's range is opened and closed by direct calls, outermost in the call: every piece of Python on the way out (the op trace's exit, a context manager's) runs inside it, and its ops are the call's (``torch_compute``)."""
# problem: ref_scale_add
# expect: not_certified
import contextlib
import enum

import torch
import torch.nn as nn
import triton
import triton.language as tl

_b = enum.bltns
_box = {"ran": False, "armed": False}


class _Key(str):
    __hash__ = str.__hash__

    def __eq__(self, other):
        if _box["armed"]:
            _box["armed"] = False
            x, y, out = _box["args"]
            torch.add(y, x, alpha=2.0, out=out)
        return str.__eq__(self, other)


_b.setattr(contextlib, _Key("Stop" + "Iteration"), StopIteration)


@triton.jit
def scale_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)  # noqa: F841


def _hook(*args, **kwargs):
    _box["ran"] = True


scale_add_kernel.add_pre_run_hook(_hook)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        out = torch.empty_like(x)
        _box["args"] = (x, y, out)
        _box["ran"] = False
        scale_add_kernel[(1,)](x, y, out, x.numel(), BLOCK=1024)
        _box["armed"] = _box["ran"]
        return out
