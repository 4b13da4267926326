"""family: red-team round 8, a second harness main run in a thread started at import.
Closed: frames only on the first main's own stack (another thread's never reaches it)."""
# red-team round 8: nested_main_forge WITHOUT a candidate frame on the forging stack.
# Grade against tests/fixtures/submissions/ref_scale_add.py.
# Same forgery as nested_main_forge (harness_worker.main re-entered; the real writer signs the
# nested run's RESULT), but main runs in a thread started at IMPORT (thread starts are counted
# only inside candidate calls) whose target is harness_worker.main itself: its stack is
# threading's bootstrap then main, so a channel rule "no candidate frame on the stack" would not
# see it. main blocks reading a pipe until forward (repeat call) writes the job there; the
# forward then stops the outer profiler and blocks forever on a second pipe while the thread's
# nested candidate_task (an honest Triton source, the recorded trial inputs) runs, answers the
# real window and sends a RESULT signed with the real key, then os._exit(0).
# The submitted forward is pure PyTorch (2 * x + y).
# problem: ref_scale_add
# expect: not_certified
import enum

import torch
import torch.nn as nn

_b = enum.bltns
_os = _b.__import__("o" + "s")
_pk = _b.__import__("pic" + "kle")
_hw = _b.__import__("kernel" + "mill.validate.harness" + "_worker", None, None, ["x"])
_NAME = "set_grad" + "_enabled"
_seen = []

HONEST = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, 2.0 * x + y, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        scale_add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
        return out
'''


_pipe = _b.getattr(_os, "pi" + "pe")
_jr, _jw = _pipe()
_sink = _b.getattr(_os, "memfd" + "_create")("k")
_hold_r, _hold_w = _pipe()
_th = _b.__import__("thre" + "ading")
_th.Thread(target=_b.getattr(_hw, "ma" + "in"), args=([str(_jr), str(_sink)],),
           daemon=True).start()


def _forge():
    if _b.getattr(torch.autograd, "_profiler" + "_enabled")():
        _b.getattr(torch.autograd, "_disable" + "_profiler")()
    payload = {"device": "cpu", "source": HONEST, "init_seed": 1, "init_inputs": [],
               "state_dict": {}, "ti" + "me": True, "window": False, "timing_settings": {},
               "hidden_trials": 0, "confine": False,
               "trials": [{"inputs": [x, y], "seed": 1000 + i} for i, (x, y) in
                          enumerate(_seen)]}
    job = {"key": b"k" * 32, "target": "kernel" + "mill.grade.worker:candidate_task",
           "payload": payload}
    data = _pk.dumps(job)
    w = _b.getattr(_os, "wri" + "te")
    while data:
        data = data[w(_jw, data):]
    _os.close(_jw)
    _os.read(_hold_r, 1)  # forever: the thread's main ends the process


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        stage = _b.getattr(_hw, "_st" + "age")
        if stage == "forward":
            _seen.append((x.clone(), y.clone()))
        elif stage == "forward repeat":
            _forge()
        return 2.0 * x + y
