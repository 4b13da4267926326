"""family: red-team round 12, an audit hook of the submission's own computes at the call's end and rewrites the harness's counts in their reply box (no Triton launch at all).
Closed: once the candidate's import begins, the worker's audit hook refuses ``sys.addaudithook`` to code that is not torch's, Triton's or kernelmill's (``forbidden_api``; CPython does not add a hook refused there)."""
# red-team round 12, audit_counts_forge: no Triton program or launch at all; forged counts.
# (1) the answer: as in audit_hook_exit, an audit hook of the submission's own (sys.addaudithook
# is not refused) runs torch.add into out on ("kernelmill.call", -1), after the witness range
# and the op tracer closed; idle in the ghost call (it sees ("kernelmill.ghost", +-1)).
# (2) the counts: the harness reads the sealed hook's counts through an audit event
# ("kernelmill.read", box); the sealed hook appends a fresh dict to box, and every later audit
# hook (ours) gets the same box: ours adds one "launches" per call, one "ghosted" per ghost call
# and the output's span to "kernel_args", so each call looks like one launch that wrote out.
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
_RD = "kernel" + "mill.re" + "ad"
_st = {"armed": False, "ghost": False, "args": None, "calls": 0, "ghosts": 0, "span": None}


def _h(event, args):
    if event == _GH:
        _st["ghost"] = args[0] > 0
    elif event == _CA and args[0] == -1 and _st["armed"]:
        _st["armed"] = False
        if _st["ghost"]:
            _st["ghosts"] += 1
        else:
            x, y, out = _st["args"]
            torch.add(y, x, alpha=2.0, out=out)
            _st["calls"] += 1
    elif event == _RD:
        box = args[0]
        if box and type(box[0]) is dict and "launches" in box[0]:
            box[0]["launches"] += _st["calls"]
            box[0]["ghosted"] += _st["ghosts"]
            if _st["span"] is not None and "kernel_args" in box[0]:
                box[0]["kernel_args"].append(_st["span"])


_b.getattr(_b.getattr(enum, "s" + "ys"), "add" + "audit" + "hook")(_h)


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

    def forward(self, x, y):
        out = torch.empty_like(x)
        _st["args"] = (x, y, out)
        p = out.data_ptr()
        _st["span"] = (p, p + out.numel() * out.element_size())
        _st["armed"] = True
        return out
