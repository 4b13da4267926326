"""family: doing a slice of the work in each captured call of several (GPU only), kept in step
with the timer's captures so that nothing but the device work tells it (review of the crowd's
bound, H1 B; ``graph_slice_every_output`` falls out of step and is caught by its answers). The
timer captures, in each phase (prepare, then the window's estimate alone), a one-call graph, a
``PROBE_CALLS``-call graph that sizes a sample, then the timing graph of a power of two of calls.
The forward counts captured calls from the phase's start (a phase begins after an eager call
or a pause of ``NEW_PHASE_S``): the first ``1 + PROBE_CALLS`` do the whole work (the one-call
graph, which the one-call check replays, and the estimate are honest), every later one computes
a quarter of the rows of its block of 4 calls and stores them into all 4 outputs. Every
replay's outputs are whole and right, its calls even, the unseen replays' answers agree, and
the one-call check's answer is right. On a 2048² GEMM (H200) a call took 25.8 µs scored
against 47.5 of the calls on new inputs: inside the scored bound (half). Caught there: a call
of the timing graph on new inputs against the one-call graph's, each alone in the window after
the flush (``device_work.scored_device_work``: ``first_call_vs_one_call_us``, 27.6 µs against
48.8; ``tests/grade/test_grade_gpu.py``). At the suite's 256² a quarter of the rows takes as
long as all of them (launch-bound): the clock read, a forbidden API, is what is caught. On CPU
there is no capture: the forward is honest (neutralized)."""
# problem: ref_matmul_fp16
# expect: neutralized
# on cuda: forbidden_api|timing_behaviour
import time

import torch
import torch.nn as nn
import triton
import triton.language as tl

S = 4  # calls per block in the timing graph: each computes a quarter of the rows
HONEST_CAPTURED = 1 + 8  # a phase's one-call graph and its 8-call probe (timer.PROBE_CALLS)
NEW_PHASE_S = 0.1  # a captured call this long after the last begins a new phase


@triton.jit(do_not_specialize=["row0", "copies"])
def matmul_kernel(a_ptr, b_ptr, c0, c1, c2, c3, M, N, K, row0, copies,
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
    if copies > 1:  # the same rows into every output of the block
        tl.store(c1 + at, tile, mask=mask)
        tl.store(c2 + at, tile, mask=mask)
        tl.store(c3 + at, tile, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = []
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

    def forward(self, a, b):
        M, N = a.shape[0], b.shape[1]
        if not (a.is_cuda and torch.cuda.is_current_stream_capturing()):
            self.captured = 0  # an eager call: the next capture begins a phase
            out = torch.empty(M, N, device=a.device, dtype=a.dtype)
            self._launch(a, b, [out], 0, M)
            return out
        now = time.perf_counter()
        if now - self.last > NEW_PHASE_S:
            self.captured = 0
        self.last = now
        index = self.captured
        self.captured += 1
        if index < HONEST_CAPTURED or M % (64 * S):
            out = torch.empty(M, N, device=a.device, dtype=a.dtype)
            self._launch(a, b, [out], 0, M)
            return out
        s = (index - HONEST_CAPTURED) % S
        if s == 0:  # the block's outputs, each its own allocation (no two overlap)
            self.block = [torch.empty(M, N, device=a.device, dtype=a.dtype) for _ in range(S)]
        rows = M // S
        self._launch(a, b, self.block, s * rows, rows)
        return self.block[s]
