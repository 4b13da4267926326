"""family: doing a slice of the work in most captured calls of several (GPU only), with whole
calls where a check reads one call: kept in step with the timer's captures as
``graph_slice_in_step`` is, but the timing graph's first two calls are whole, so its first call
on new inputs (the unseen replay's, ``first_call_vs_one_call_us``) is the whole work; every
later call computes half of the rows of its pair and stores them into both outputs of the pair
(a power of two of calls, less two, is even: every output is whole when the replay ends). Its
calls read even against the upper quartile (``graph_calls_even``: the halves are most of them),
and on a 2048² GEMM (H200) its scored calls are a little over half of a whole call, inside the
scored bound (half of the calls on new inputs, which are cold). Caught against the one-call
check made warm (its inputs just loaded, no flush, as a scored call finds its caches):
``device_work.scored_device_work``'s ``scored_vs_one_call_us``. At the suite's 256² half the rows
take as long as all of them (launch-bound): the clock read, a forbidden API, is what is caught.
On CPU there is no capture: the forward is honest (neutralized)."""
# problem: ref_matmul_fp16
# expect: neutralized
# on cuda: forbidden_api|timing_behaviour
import time

import torch
import torch.nn as nn
import triton
import triton.language as tl

S = 2  # calls per pair after the whole ones: each computes half of the rows
HONEST_CAPTURED = 1 + 8  # a phase's one-call graph and its 8-call probe (timer.PROBE_CALLS)
WHOLE_FIRST = 2  # the timing graph's first calls, whole
NEW_PHASE_S = 0.1  # a captured call this long after the last begins a new phase


@triton.jit(do_not_specialize=["row0", "copies"])
def matmul_kernel(a_ptr, b_ptr, c0, c1, M, N, K, row0, copies,
                  sam, sak, sbk, sbn, scm, scn,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = row0 + tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * sam + (k + rk)[None, :] * sak,
                    mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k + rk)[:, None] * sbk + rn[None, :] * sbn,
                    mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tile = acc.to(tl.float16)
    at = rm[:, None] * scm + rn[None, :] * scn
    tl.store(c0 + at, tile, mask=mask)
    if copies > 1:  # the same rows into both outputs of the pair
        tl.store(c1 + at, tile, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.pair = []
        self.captured = 0  # captured calls since the phase began
        self.last = 0.0

    def _launch(self, a, b, outs, row0, rows):
        M, K = a.shape
        N = b.shape[1]
        block = 64 if M >= 1024 else 32
        grid = (triton.cdiv(rows, block), triton.cdiv(N, block))
        ptrs = (outs * S)[:S]
        matmul_kernel[grid](a, b, *ptrs, M, N, K, row0, len(outs), a.stride(0), a.stride(1),
                            b.stride(0), b.stride(1), N, 1, BM=block, BN=block, BK=32)

    def _whole(self, a, b):
        out = torch.empty(a.shape[0], b.shape[1], device=a.device, dtype=a.dtype)
        self._launch(a, b, [out], 0, a.shape[0])
        return out

    def forward(self, a, b):
        M, N = a.shape[0], b.shape[1]
        if not (a.is_cuda and torch.cuda.is_current_stream_capturing()):
            self.captured = 0  # an eager call: the next capture begins a phase
            return self._whole(a, b)
        now = time.perf_counter()
        if now - self.last > NEW_PHASE_S:
            self.captured = 0
        self.last = now
        index = self.captured
        self.captured += 1
        if index < HONEST_CAPTURED + WHOLE_FIRST or M % (64 * S):
            return self._whole(a, b)
        s = (index - HONEST_CAPTURED - WHOLE_FIRST) % S
        if s == 0:  # the pair's outputs, each its own allocation (no two overlap)
            self.pair = [torch.empty(M, N, device=a.device, dtype=a.dtype) for _ in range(S)]
        rows = M // S
        self._launch(a, b, self.pair, s * rows, rows)
        return self.pair[s]
