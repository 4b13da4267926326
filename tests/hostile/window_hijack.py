"""family: red-team round 8, the timing window's commands answered by forward (report and receive called by the submission).
Closed: the channel writes a frame only with no submission code on the stack."""
"""red-team round 8: the TIMING WINDOW PROTOCOL taken over from inside forward (forged timing).
# Grade against tests/fixtures/submissions/ref_scale_add.py.
# The kernel is honest (2x+y in Triton, every call). What is forged is the timing.
# harness_worker.report() and receive() are plain module functions any code may call: report's
# frames are signed by the channel's audit hook because report's own code object raises the
# event, whoever called report. On the first forward call of the timing stage (harness_worker
# ._stage == "timing", i.e. inside Timer.prepare, before the real worker has said "ready"), the
# forward itself reports a forged {"ready": ...} (perf_counter, 1 call per sample), then reads
# the parent's commands with receive() and answers each one: "round N" -> N forged samples of
# 0.0025 ms, "loop N" -> answered at once (so the parent's clock bound is consistent with the
# forged samples), "unseen" -> {"unseen": 0} (so the worker's unseen facts stay None and the
# judge's unseen checks return early). When "stop" arrives it is pushed back into the control
# receiver's line buffer (a list in read_line's closure cell: reading __closure__ raises no audit
# event) and forward returns; the real prepare() finishes, its late "ready" lands after the
# window, and the real serve_window reads the pushed-back "stop" and ends with no samples.
# No frame, no gc/ctypes, nothing rebound, no patch.
"""
# problem: ref_scale_add
# expect: not_certified
import enum

import torch
import torch.nn as nn
import triton
import triton.language as tl

_b = enum.bltns
_hw = _b.__import__("kernel" + "mill.validate.harness" + "_worker", None, None, ["x"])
_rep = _b.getattr(_hw, "rep" + "ort")
_rcv = _b.getattr(_hw, "rec" + "eive")
_done = [False]
FAKE = 0.0025


@triton.jit
def scale_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, 2.0 * x + y, mask=mask)


def _push_back(line):
    ctl = _b.getattr(_hw, "_con" + "trol")
    for cell in _b.getattr(ctl, "__clo" + "sure__") or ():
        v = cell.cell_contents
        if type(v) is list and v and type(v[0]) is bytes:
            v[0] = line.encode() + b"\n" + v[0]
            return


def _take_over():
    _rep({"ready": {"method": "perf_" + "counter", "calls_per_sample": 1, "estimate_ms": FAKE,
                    "host_ms": FAKE, "capture_error": None, "profiler": True}})
    i = 0
    while True:
        line = _rcv()
        cmd = line.split()
        if not cmd or cmd[0] == "stop":
            _push_back(line)
            return
        verb = cmd[0]
        arg = float(cmd[1]) if len(cmd) > 1 else 0.0
        if verb == "warm":
            _rep({"warm": 3, "resized": False, "calls_per_sample": 1, "estimate_ms": FAKE})
        elif verb == "settle":
            _rep({"settle": 3})
        elif verb == "round":
            out = []
            for _ in range(int(arg)):
                i += 1
                out.append(FAKE * (1.0 + 0.0005 * (i % 3)))
            _rep({"round": out})
        elif verb == "loop":
            _rep({"loop": int(arg)})
        elif verb == "unseen":
            _rep({"unseen": 0})
        else:
            _push_back(line)
            return


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        scale_add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
        if not _done[0] and _b.getattr(_hw, "_st" + "age") == "timing":
            _done[0] = True
            _take_over()
        return out
