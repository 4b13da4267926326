"""family: red-team round 12, as audit_hook_exit, the kernel launched on an empty grid.
Closed: once the candidate's import begins, the worker's audit hook refuses ``sys.addaudithook`` to code that is not torch's, Triton's or kernelmill's (``forbidden_api``; CPython does not add a hook refused there)."""
# red-team round 12, audit_hook_exit_fast (grid of 0 programs: no Triton program runs): PyTorch computes the answer after the witness's FORWARD
# range closed, from an audit hook of the submission's own. sys.addaudithook is not refused (the
# event is not in INTERNALS_EVENTS). _Run.invoke raises ("kernelmill.call", -1) right after
# Witness.close_call closed the range and after the op tracer exited; every audit hook runs on it,
# ours last (after the sealed hook set depth to 0). The hook runs torch.add into out there, where
# the witness drops ops as "outside every candidate call". The hook also sees ("kernelmill.ghost",
# +-1) and stays idle in the ghost call, so the skipped (empty) kernel leaves NaN poison there.
# The Triton kernel does nothing.
# problem: ref_scale_add
# expect: not_certified
import enum

import torch
import torch.nn as nn
import triton
import triton.language as tl

_b = enum.bltns
_GH = "kernel" + "mill.gh" + "ost"
_CA = "kernel" + "mill.ca" + "ll"
_st = {"armed": False, "ghost": False, "args": None}


def _h(event, args):
    # compare against precomputed names
    if event == _GH:
        _st["ghost"] = args[0] > 0
    elif event == _CA and args[0] == -1 and _st["armed"]:
        _st["armed"] = False
        if not _st["ghost"]:
            x, y, out = _st["args"]
            torch.add(y, x, alpha=2.0, out=out)


_b.getattr(_b.getattr(enum, "s" + "ys"), "add" + "audit" + "hook")(_h)


@triton.jit
def scale_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)  # noqa: F841


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        out = torch.empty_like(x)
        _st["args"] = (x, y, out)
        scale_add_kernel[(0,)](x, y, out, x.numel(), BLOCK=1024)
        _st["armed"] = True
        return out
