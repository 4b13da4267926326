"""family: the unseen-input check's inputs seen as they are read (each new trial comes as a late
part, which the worker reads while the submission's objects live beside it: at import the
submission rebinds what that reading once looked up at call time, ``torch.frombuffer``, the
harness's part reader and slot walker, for one call: the first late part read through them
hands over the whole part, whose trial the wrapper answers in plain Python before putting the
originals back, so that no patch check finds them; forward copies a stored answer, keyed by two
scalars of x, with a Triton kernel, and computes inputs it has not seen slowly, keeping the
answer: an answer cache that would be as fast on the new trials as on the timed ones)

Caught: the late part is read by the worker's private copy of ``validate.late_read``, whose
functions were bound before the candidate's import; none of the rebound names is called, so no
new trial is seen before its call and the originals are never put back: the patch check finds
all three replaced (``patched_function``; the static scan reports the imports too). Against
the reading that looked names up at call time, the wrapper on ``torch.frombuffer`` was called
and put back (``test_mechanisms``: the reading with every such name rebound).
"""
# problem: ref_scale_add_64k (each input is 64 KiB, so it travels in a memory file)
# expect: patched_function
import array

import torch
import torch.nn as nn
import triton
import triton.language as tl
from kernelmill.validate import late_read, tensor_slots

N = 16384
SLOW = 24  # passes over the inputs where they are new: a cached answer is far faster
_answers = {}
_original = torch.frombuffer
_saved = {"frombuffer": (torch, torch.frombuffer), "_replaced": (tensor_slots,
                                                                 tensor_slots._replaced),
          "read_part": (late_read, late_read.read_part)}


def _put_back():
    for name, (owner, value) in _saved.items():
        setattr(owner, name, value)


def _learn(buffer):
    """A whole late part: x then y from its first bytes; the answer 2x + y in plain Python."""
    try:
        floats = memoryview(buffer).cast("B")[:2 * N * 4].cast("f")
    except (TypeError, ValueError):
        return
    x, y = floats[:N], floats[N:2 * N]
    _answers[(x[0], x[1])] = array.array("f", (2.0 * a + b for a, b in zip(x, y)))


def _frombuffer(buffer, *args, **kwargs):
    if kwargs.get("count") == N * 4:
        _learn(buffer)
        _put_back()
    return _original(buffer, *args, **kwargs)


def _read_part(data, size, *args, **kwargs):
    _learn(data)
    _put_back()
    return _saved["read_part"][1](data, size, *args, **kwargs)


def _replaced(item, leaf, *args, **kwargs):
    _put_back()
    return _saved["_replaced"][1](item, leaf, *args, **kwargs)


torch.frombuffer = _frombuffer
late_read.read_part = _read_part
tensor_slots._replaced = _replaced


@triton.jit
def scale_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, 2.0 * x + tl.load(y_ptr + offsets, mask=mask), mask=mask)


@triton.jit
def copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(dst_ptr + offsets, tl.load(src_ptr + offsets, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        key = (x[0].item(), x[1].item())
        known = _answers.get(key)
        if not _answers:  # the first call compiles both kernels (on CUDA no later call may)
            copy_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        if known is None:  # inputs first seen here: the answer computed, slowly, and kept
            for _ in range(SLOW):
                scale_add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
            _answers[key] = out.clone()
            return out
        source = known if type(known) is torch.Tensor else \
            _original(known, dtype=torch.float32).to(x.device)
        copy_kernel[(triton.cdiv(n, 1024),)](source, out, n, BLOCK=1024)
        return out
