"""family: doing a slice of the work in each captured call of several (GPU only), each slice
written into every output of its block of calls (review of the crowd's bound, H1 B). Inside a
capture the calls come in blocks of ``S``: the block's first call allocates ``S`` outputs
side by side (no two overlap), and call ``s`` of the block computes rows ``s/S`` of the
product once and stores them into all ``S``. Once a replay ends every output is whole and
right, every call launches the same kernel and keeps the GPU busy alike (a slice's time), and
the first unseen replay's calls, compared one by one after it, all agree. The scored time is
about an ``S``-th of the work. A new capture is told by the time since the last captured call.
Caught: a replay of several calls stands for no call's work; the one-call graph's check (one
call, alone, its answer compared) does (``probes.scored_device_work``). On CPU there is no
capture: the honest kernel it then is."""
# problem: ref_matmul_fp16
# expect: certified
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
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, row0, copies, copy_stride,
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
    for j in range(copies):  # the same rows into every output of the block
        tl.store(c_ptr + j * copy_stride + rm[:, None] * scm + rn[None, :] * scn,
                 acc.to(tl.float16), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = None
        self.call = 0
        self.last = 0.0

    def _launch(self, a, b, out, row0, rows, copies):
        M, K = a.shape
        N = b.shape[1]
        block = 64 if M >= 1024 else 32
        grid = (triton.cdiv(rows, block), triton.cdiv(N, block))
        matmul_kernel[grid](a, b, out, M, N, K, row0, copies, M * N, a.stride(0), a.stride(1),
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
            if s == 0:
                self.block = torch.empty(S, M, N, device=a.device, dtype=a.dtype)
            rows = M // S
            self._launch(a, b, self.block, s * rows, rows, S)
            return self.block[s]
        out = torch.empty(M, N, device=a.device, dtype=a.dtype)
        self._launch(a, b, out, 0, M, 1)
        return out
