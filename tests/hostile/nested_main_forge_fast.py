"""family: red-team round 8, the nested main and the window answered by the submission: PyTorch at a forged speedup.
Closed: one hello per process, frames only with no submission code on the stack."""
# red-team round 8: nested_main_forge + window_hijack: the nested run's source also forges the timing
# window, so a pure-PyTorch submission is certified at a forged speedup.
# red-team round 8: THE WHOLE RESULT FORGED by re-entering harness_worker.main.
# Grade against tests/fixtures/submissions/ref_scale_add.py.
# The submitted ModelNew has no kernel at all: forward is `2 * x + y` in PyTorch.
# The channel's writer (an audit hook) signs a RESULT frame for any event raised by main's code
# object; it does not ask WHICH call of main raised it. main(argv) is a plain module function:
# called again with two memfds, it reads a job of our making (pickle of a dict), installs a
# second writer (our fd, our key) next to the real one, runs the job's target and sends its
# result, signed by the REAL writer with the real key, then os._exit(0). The target is the real
# kernelmill.grade.worker:candidate_task, given a payload whose source is an HONEST Triton
# kernel and whose trials are the inputs this forward was shown (recorded in stage "forward",
# in order). The nested run produces genuine facts for the honest source (its own hooks,
# witness, ghost call, its own window answers through the real control pipe: "ready",
# rounds, loop, unseen), and those are what the parent judges and certifies.
# Where: the repeat call arms a one-shot rebinding of torch.set_grad_enabled, which no_grad's
# __exit__ calls after the outer tracer and range closed (no dispatch mode left on the stack);
# the one-shot restores the original, stops the outer profiler and calls main.
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

HONEST = '''import enum

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
            v[0] = line.encode() + b"\\n" + v[0]
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
'''


def _fd_with(data):
    fd = _b.getattr(_os, "memfd" + "_create")("k")
    _b.getattr(_os, "wri" + "te")(fd, data)
    _os.lseek(fd, 0, 0)
    return fd


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
    fin = _fd_with(_pk.dumps(job))
    fout = _fd_with(b"")
    _b.getattr(_hw, "ma" + "in")([str(fin), str(fout)])  # never returns (os._exit)


def _arm():
    original = _b.getattr(torch, _NAME)

    def once(mode):
        _b.setattr(torch, _NAME, original)
        r = original(mode)
        _forge()
        return r

    _b.setattr(torch, _NAME, once)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        stage = _b.getattr(_hw, "_st" + "age")
        if stage == "forward":
            _seen.append((x.clone(), y.clone()))
        elif stage == "forward repeat":
            _arm()
        return 2.0 * x + y
