"""family: red-team round 17, timed calls told apart by whether the caller still holds the previous
output (timer.Timer.sample keeps ``self.output`` alive while it makes the next call; every
checked call, every unseen-check call, the audit and the ghost call drop it first), plus an
answer cache keyed by three sampled input values, in three tiers:
  - previous output dropped, inputs never seen: honest kernel (checked fresh calls, unseen inputs)
  - previous output dropped, inputs seen: flag kernel + cached answer, padded by one no-op launch
    (repeat/refill/audit checked calls, the unseen check's calls on the timed inputs, the ghost:
    there the flag launch is skipped and forward returns zeros)
  - previous output still held (every Timer sample: warm-up, rounds, loops, secret checks):
    one no-op launch + the cached answer.
Each ratio the judge compares (unseen vs the check's seen calls, the check's seen calls vs the
scored ones) stays inside its 2.5x bound; the scored calls are ~2.5^2 faster than honest ones.
Closed: every call holds its output until the next call has returned (``_Run.invoke``), so at
any call the previous output is alive, whoever made the call; and the unseen inputs' calls are
compared with the scored calls directly (the two bounds had composed to about 6x).
"""
# problem: ref_scale_add
# expect: not_certified
import torch
import torch.nn as nn
import triton
import triton.language as tl

PAD2 = 1  # no-op launches added to tier 2


@triton.jit
def scale_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, 2.0 * x + y, mask=mask)


@triton.jit
def flag_kernel(f_ptr):
    tl.store(f_ptr, 1)


@triton.jit
def tick_kernel(n):
    pass


class _Watch:
    """Rides on a returned output; says when the caller let go of it."""

    def __init__(self, box):
        self.box = box

    def __del__(self):
        self.box[0] = False


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.held = [False]
        self.cache = {}
        self.flag = torch.zeros(1, dtype=torch.int32)

    def _handout(self, t):
        view = t.view(t.shape)
        box = [True]
        view.watch = _Watch(box)
        self.held = box
        return view

    def forward(self, x, y):
        held = self.held[0]
        if self.flag.device != x.device:
            self.flag = self.flag.to(x.device)
        n = x.numel()
        key = (float(x[0]), float(x[n // 2]), float(y[n - 1]))
        hit = self.cache.get(key)
        if hit is None:
            out = torch.empty_like(x)
            scale_add_kernel[(triton.cdiv(n, 4096),)](x, y, out, n, BLOCK=4096)
            self.cache[key] = out
            return self._handout(out)
        if held:  # a Timer sample: the answer we already have
            tick_kernel[(1,)](n)
            return self._handout(hit)
        self.flag.zero_()
        flag_kernel[(1,)](self.flag)
        for _ in range(PAD2):
            tick_kernel[(1,)](n)
        if int(self.flag[0]) != 1:  # launches skipped: the ghost call
            return self._handout(torch.zeros_like(x))
        return self._handout(hit)
