"""family: doing a slice of the work in each captured call of several (GPU only), each slice
written into every output of its block of calls (review of the crowd's bound, H1 B). Inside a
capture the calls come in blocks of ``S``: the block's first call allocates ``S`` outputs
(no two overlap), and call ``s`` of the block computes rows ``s/S`` of the
product once and stores them into all ``S``. Once a replay ends every output is whole and
right, every call launches the same kernel and keeps the GPU busy alike (a slice's time), and
the first unseen replay's calls, compared one by one after it, all agree. The scored time is
about an ``S``-th of the work. A new capture is told by the time since the last captured call.
Caught: a replay of several calls stands for no call's work; the one-call graph's check (one
call, alone, its answer compared) does (``device_work.scored_device_work``). On CPU there is no
capture: the cheat never runs (neutralized), and the clock read is a forbidden API anyway."""
# problem: ref_matmul_fp16
# expect: neutralized
# on cuda: timing_behaviour
import time

import torch
import torch.nn as nn
import triton
import triton.language as tl

S = 8  # calls per block: each computes an S-th of the rows
NEW_CAPTURE_S = 1e-3  # a captured call this long after the last starts a new capture


# one compiled kernel for eager and captured calls (a compile after the first forward is refused)
@triton.jit(do_not_specialize=["row0", "copies"])
def matmul_kernel(a_ptr, b_ptr, c0, c1, c2, c3, c4, c5, c6, c7, M, N, K, row0, copies,
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
        tl.store(c4 + at, tile, mask=mask)
        tl.store(c5 + at, tile, mask=mask)
        tl.store(c6 + at, tile, mask=mask)
        tl.store(c7 + at, tile, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = []
        self.call = 0
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
        if a.is_cuda and torch.cuda.is_current_stream_capturing() and M % S == 0:
            now = time.perf_counter()
            if now - self.last > NEW_CAPTURE_S:
                self.call = 0
            self.last = now
            s = self.call % S
            self.call += 1
            if s == 0:  # the block's outputs, each its own allocation (no two overlap)
                self.block = [torch.empty(M, N, device=a.device, dtype=a.dtype)
                              for _ in range(S)]
            rows = M // S
            self._launch(a, b, self.block, s * rows, rows)
            return self.block[s]
        out = torch.empty(M, N, device=a.device, dtype=a.dtype)
        self._launch(a, b, [out], 0, M)
        return out
