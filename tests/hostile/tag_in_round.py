"""family: tell, an input tag set and cleared within each timing round (red-team round 24,
against round 23's fix, which compared the inputs after each whole round). The forward spots
the checked calls' last call from the inputs' content and counts calls from there (the timer's
preparation and every CPU round have a fixed number of calls): a round's first call writes the
tag (x[0] by one float32 step), the next find it and recompute 1 of 4 blocks into a kept
output, the last writes the original back, so the inputs are clean at every round's end. Any
call after a load finds no tag and computes in full. Certified 2 of 10 runs on CPU at about
1.9x. Now the inputs are also compared after a secret share of the scored calls
(``worker._Run.sometimes_check_timed_inputs``, outside the samples' time).
On CUDA (eager: its ``.item()`` breaks the capture) the rounds have other sizes than the CPU
rounds its count assumes; on an H100 (2026-11-28) it was certified with every check passed, as
the honest kernel it falls back to after three missed tags. Its ``.item()`` of x[0] on every
call is now ``host_compute`` everywhere (red-team round 25: input values read on the host):
on CPU either finding may come first (a loaded 2-core host read ``host_compute`` once)."""
# problem: ref_scale_add
# expect: input_mutated|host_compute
# on cuda: host_compute
import math
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def k(x_ptr, y_ptr, out_ptr, n, tagv, TAG: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, 2.0 * x + y, mask=mask)
    if TAG:
        if tl.program_id(0) == 0:
            tl.store(x_ptr, tagv)


S = {"t0": None, "other": False, "c": 0, "tv": None, "orig": None, "miss": 0, "dead": False,
     "out": None}


def _next32(v):  # the next float32 above v (v a float32 value), without a torch op
    m, e = math.frexp(v)
    return v + math.ldexp(1.0, e - 24) if v != 0.0 else 1e-38


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        if torch.cuda.is_available():  # both variants compiled before any check (no late ptxas)
            x, y, out = (torch.zeros(4096, device="cuda") for _ in range(3))
            for tag in (False, True):
                k[(1,)](x, y, out, 4096, 0.0, TAG=tag, BLOCK=1024)

    def forward(self, x, y):
        n = x.numel()
        blocks = triton.cdiv(n, 1024)
        x0 = x[0].item()
        if S["t0"] is None:
            S["t0"] = x0
        if S["c"] == 0:
            if x0 != S["t0"]:
                S["other"] = True
            elif S["other"]:
                S["c"] = 1  # this is the repeat call; next is timing call 1
            out = torch.empty_like(x)
            k[(blocks,)](x, y, out, n, 0.0, TAG=False, BLOCK=1024)
            return out
        S["c"] += 1
        c = S["c"]
        present = S["tv"] is not None and x0 == S["tv"]
        if S["tv"] is not None and not present:
            S["miss"] += 1
            if S["miss"] >= 3:
                S["dead"] = True
        elif present:
            S["miss"] = 0
        S["tv"] = None
        if S["dead"] or c <= 10:
            out = torch.empty_like(x)
            k[(blocks,)](x, y, out, n, 0.0, TAG=False, BLOCK=1024)
            S["out"] = out
            return out
        pos = (c - 11) % 3  # c = timed call + 1
        if present and S["out"] is not None:
            out = S["out"]
            if pos == 2:  # clear: restore the original value
                k[(max(1, blocks // 4),)](x, y, out, n, S["orig"], TAG=True, BLOCK=1024)
            else:
                k[(max(1, blocks // 4),)](x, y, out, n, 0.0, TAG=False, BLOCK=1024)
                S["tv"] = x0
            return out
        out = torch.empty_like(x)
        if pos == 2:
            k[(blocks,)](x, y, out, n, 0.0, TAG=False, BLOCK=1024)
        else:
            tv = _next32(x0)
            S["orig"], S["tv"] = x0, tv
            k[(blocks,)](x, y, out, n, tv, TAG=True, BLOCK=1024)
        S["out"] = out
        return out
