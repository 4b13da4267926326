"""family: honest only in the graph the unseen check replays (an answer cache on the device,
as in observed_device_cache, switched off in the first call of a capture that follows calls
made outside any capture: that is the one-call graph timed once per unseen check; every
later captured call, the timed many-call graph included, may copy its stored answer)

The timer captures three graphs back to back after two uncaptured warm-ups: a one-call graph
(kept for the unseen-input calls), an eight-call graph (the estimate) and the timing graph. Only
the first sees "capturing now, not capturing the call before". Its replays compute on any
inputs, so seen and unseen inputs take the same time on both clocks; the timing graph's calls
hit the cache on the timed inputs (right answers: the cache is keyed by content, so the graph
check's refilled inputs miss once, compute, and the rest of that replay hits).

Caught: with a captured graph the unseen-input check replays the timing graph itself and
times its first call's kernels (``worker._Run.unseen``, ``Witness.span_us``), so there is no
graph of its own to tell apart. On CPU there is no capture: it is ``observed_device_cache``.
"""
# problem: ref_linear
# expect: timing_behaviour
# on cuda: timing_behaviour
# Code path attacked:
#  - validate/timer.py Timer._capture/_per_call_ms: `_single` (the graph Timer.once replays
#    for worker._Run.unseen) is the FIRST graph captured, right after uncaptured warm-up calls;
#    the timing graph (`self.graph`) is captured later, with no uncaptured call in between.
#  - torch.cuda.is_current_stream_capturing() is public and not in static.py's lists; the
#    worker's docstring lists what cannot tell calls apart but not capture state.
#  - judge._unseen_checks compares unseen vs seen calls of the SAME one-call graph (both clocks):
#    ratio ~1.0. Launch counts equal (2 launches per call on every path), no PyTorch compute,
#    graph_check right (content-keyed cache), ghost right (skipped launches leave NaN).
# Result: timed per-call time = the cached copy's, reported as a speedup.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def cached_matmul(a_ptr, b_ptr, c_ptr, cache_ptr, key_ptr, use_ptr, M, N, K, sam, sak, sbk,
                  sbn, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    tile = rm[:, None] * N + rn[None, :]
    inside = (rm[:, None] < M) & (rn[None, :] < N)
    first = tl.load(a_ptr)
    last = tl.load(a_ptr + (M - 1) * sam + (K - 1) * sak)
    hit = (first == tl.load(key_ptr)) & (last == tl.load(key_ptr + 1)) & (tl.load(use_ptr) != 0)
    if hit:
        acc = tl.load(cache_ptr + tile, mask=inside, other=0.0)
    else:
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, K, BK):
            a = tl.load(a_ptr + rm[:, None] * sam + (k + rk)[None, :] * sak,
                        mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
            b = tl.load(b_ptr + (k + rk)[:, None] * sbk + rn[None, :] * sbn,
                        mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
            acc += tl.dot(a, b, input_precision="ieee")
        tl.store(cache_ptr + tile, acc, mask=inside)
    tl.store(c_ptr + tile, acc, mask=inside)


@triton.jit
def remember_key(a_ptr, key_ptr, M, K, sam, sak):
    tl.store(key_ptr, tl.load(a_ptr))
    tl.store(key_ptr + 1, tl.load(a_ptr + (M - 1) * sam + (K - 1) * sak))


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_features, in_features) * 0.1)
        self.cache = None
        self.was_capturing = False

    def forward(self, x):
        w = self.weight.t()
        M, K = x.shape
        N = w.shape[1]
        if self.cache is None:
            self.cache = torch.empty(M, N, device=x.device, dtype=torch.float32)
            self.key = torch.full((2,), float("nan"), device=x.device)
            self.on = torch.ones(1, device=x.device, dtype=torch.int32)
            self.off = torch.zeros(1, device=x.device, dtype=torch.int32)
        capturing = x.is_cuda and torch.cuda.is_current_stream_capturing()
        honest = capturing and not self.was_capturing  # the one-call graph of the unseen check
        self.was_capturing = capturing
        out = torch.empty(M, N, device=x.device, dtype=x.dtype)
        grid = (triton.cdiv(M, 16), triton.cdiv(N, 16))
        cached_matmul[grid](x, w, out, self.cache, self.key, self.off if honest else self.on,
                            M, N, K, x.stride(0), x.stride(1), w.stride(0), w.stride(1),
                            BM=16, BN=16, BK=16)
        remember_key[(1,)](x, self.key, M, K, x.stride(0), x.stride(1))
        return out
