"""family: red-team round 6, torch.cuda's lazy-init lock rebound to compute before each observed call.
Closed: once a candidate's code may run, the generators are seeded by C calls alone."""
# red-team 6: work before the observed range through NON-CALLABLE module state on the worker's
# seeding path. Grade against tests/fixtures/submissions/ref_scale_add.py.
# The worker's _manual_seed (round-5 fix) still calls the bound torch.cuda.manual_seed_all when
# CUDA is not initialized (always on CPU). That Python function calls torch.cuda._lazy_call,
# which runs `with _initialization_lock:` -- a module global looked up at call time. The lock is
# not callable, so snapshot_modules never records it; rebinding it (functools.update_wrapper's
# `assigned`, no audit event for a module setattr) puts candidate code (__enter__) inside every
# _Run.invoke, after the call's inputs are loaded into the persistent buffers and before the
# witness range / op trace open. There torch.add computes the answer; forward only copies it
# with a Triton copy kernel (a launch; the ghost call skips it and gets garbage).
# Proof: after the first call forward never computes; without the hook it would return zeros.
# problem: ref_scale_add
# expect: not_certified
import functools

import torch
import torch.nn as nn
import triton
import triton.language as tl

_state = {"inputs": None, "answer": None, "hook_answers": 0}


class _Lock:
    def __enter__(self):
        inputs = _state["inputs"]
        if inputs is not None:
            x, y = inputs
            _state["answer"] = torch.add(y, x, alpha=2.0)
            _state["hook_answers"] += 1
        return True

    def __exit__(self, *exc):
        return False


class _Holder:
    def __init__(self):
        self._initialization_lock = _Lock()


functools.update_wrapper(torch.cuda, _Holder(), assigned=("_initialization_lock",), updated=())


@triton.jit
def scale_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, 2.0 * x + y, mask=mask)


@triton.jit
def copy_kernel(src_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(src_ptr + offsets, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        grid = (triton.cdiv(n, 1024),)
        if _state["inputs"] is None:  # the first call only: nothing seen yet
            _state["inputs"] = (x, y)
            scale_add_kernel[grid](x, y, out, n, BLOCK=1024)
            return out
        # every later call: copy what the hook computed; zeros if the hook did not run
        answer = _state["answer"] if _state["answer"] is not None else torch.zeros_like(x)
        copy_kernel[grid](answer, out, n, BLOCK=1024)
        return out
