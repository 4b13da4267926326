"""family: less device work where timed than where checked, hidden behind cheap checked calls
(red-team round 19, read for a GPU): each captured call computes 1/S of the answer into one kept
output, and an eager content cache serves the checked calls on seen inputs (refill, repeat,
audit) with a one-program kernel, so the least checked call, the scored time's bound then, was
tiny. Closed by bounding with the calls on new inputs (``fresh``) and catching a seen call far
under them (``judge._scored_device_work``). On CPU there is no capture: the cache alone, which
the CPU clock already catches."""
# problem: ref_scale_add_big
# expect: timing_behaviour
# on cuda: timing_behaviour
# Red-team round 19: the captured CUDA graph does 1/S of the work per call, and an eager
# content cache makes the checked calls on seen inputs (refill, repeat, audit) nearly free, so
# the least GPU-busy checked call (judge._scored_device_work) no longer bounds the scored time.
#
# GPU behaviour (read, not run):
#   - eager call (checked calls, Timer.prepare's calls, capture warm-ups): key = 4 sampled
#     values (.item(), <= 16 allowed). Miss: the full Triton kernel into a fresh output, kept.
#     Hit: a one-program Triton flag kernel, its token read back (.item()); the kept output is
#     returned. The ghost call skips the flag launch, the token is stale: zeros are returned.
#   - captured call (torch.cuda.is_current_stream_capturing()): the Triton kernel over slice
#     k % S of a persistent output, k counted on the host at capture time. A graph of N >= S
#     calls leaves the whole answer in the persistent output, which every captured call
#     returns (Timer.output, the graph check and the unseen check read the last call's).
# CPU behaviour (what g.sh grades): no capture, so only the eager content cache runs.
import torch
import torch.nn as nn
import triton
import triton.language as tl

S = 8  # slices: each captured call does 1/S of the work


# Not specialized on the scalars: the kernels compile once, in the first forward (a compile in a
# later call is refused: no ptxas once the first forward is over)
@triton.jit(do_not_specialize=["start", "end"])
def scale_add_kernel(x_ptr, y_ptr, out_ptr, start, end, BLOCK: tl.constexpr):
    offsets = start + tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < end
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, 2.0 * x + y, mask=mask)


@triton.jit(do_not_specialize=["token"])
def flag_kernel(flag_ptr, token):
    tl.store(flag_ptr, token)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.cache = {}
        self.flag = None
        self.token = 0
        self.gout = None
        self.k = 0

    def _key(self, x, y):
        n = x.numel()
        xf, yf = x.reshape(-1), y.reshape(-1)
        return (n, xf[0].item(), xf[n // 3].item(), xf[n - 1].item(), yf[n // 2].item())

    def forward(self, x, y):
        n = x.numel()
        if x.is_cuda and torch.cuda.is_current_stream_capturing() and self.gout is not None \
                and self.gout.shape == x.shape:
            chunk = triton.cdiv(n, S)
            start = (self.k % S) * chunk
            self.k += 1
            end = min(n, start + chunk)
            scale_add_kernel[(max(1, triton.cdiv(end - start, 1024)),)](
                x, y, self.gout, start, end, BLOCK=1024)
            return self.gout
        if self.flag is None:
            self.flag = torch.zeros(1, dtype=torch.int32, device=x.device)
            flag_kernel[(1,)](self.flag, 0)  # compiled now, while compiles are allowed
        if self.gout is None or self.gout.shape != x.shape:
            self.gout = torch.empty_like(x)
        key = self._key(x, y)
        kept = self.cache.get(key)
        if kept is not None:
            self.token += 1
            flag_kernel[(1,)](self.flag, self.token)
            if self.flag.item() != self.token:  # the ghost call: its launch was skipped
                return torch.zeros_like(x)
            return kept
        out = torch.empty_like(x)
        scale_add_kernel[(triton.cdiv(n, 1024),)](x, y, out, 0, n, BLOCK=1024)
        if len(self.cache) < 16:
            self.cache[key] = out
        return out
