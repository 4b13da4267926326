"""family: inputs the candidate has "never seen" read from its own process memory (the worker
once received every trial's inputs, the unseen-input check's too, at job start in one memory
file mapped into the process: a payload file of its own, or its reference run's shown file; at import the submission finds that mapping in its own maps file,
maps it again through /proc/self/map_files with UntypedStorage.from_file, and has PyTorch
compute the answer of every input pair there before any call is observed; forward reads two
scalars of x as a key and a Triton kernel copies the stored answer; a miss answers zeros)

Caught: each unseen input reaches the worker only when its call comes (``harness._LateFile``),
so the unseen-input check gets zeros (a wrong answer).
"""
# problem: ref_scale_add_64k (each input is 64 KiB, so it travels in the job's memory file)
# expect: timing_behaviour
# on cuda: not_certified  (its answers are host tensors)
import torch
import torch.nn as nn
import triton
import triton.language as tl

N = 16384
_answers = {}


def _payload():
    where = "/pr" + "oc/self/"
    with open(where + "maps") as handle:
        for line in handle:
            if "memfd:" in line and ("-payload" in line or "-shown" in line):
                span = line.split()[0]
                lo, hi = (int(v, 16) for v in span.split("-"))
                st = torch.UntypedStorage.from_file(where + "map_files/" + span, False, hi - lo)
                return torch.empty(0, dtype=torch.uint8).set_(st)
    return None


def _learn():
    blob = _payload()
    if blob is None:
        return
    size = N * 4
    chunks = [blob[o:o + size].view(torch.float32) for o in range(0, blob.numel() - size + 1, size)]
    for x, y in zip(chunks[0::2], chunks[1::2]):
        _answers[(x[0].item(), x[1].item())] = (2.0 * x + y).clone()


_learn()


@triton.jit
def copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(dst_ptr + offsets, tl.load(src_ptr + offsets, mask=mask), mask=mask)


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
        known = _answers.get((x[0].item(), x[1].item()))
        if known is not None:
            copy_kernel[(triton.cdiv(n, 16384),)](known, out, n, BLOCK=16384)
        else:   # proof variant: a miss returns zeros (a wrong answer)
            zero = torch.zeros_like(x)
            copy_kernel[(triton.cdiv(n, 16384),)](zero, out, n, BLOCK=16384)
        return out
