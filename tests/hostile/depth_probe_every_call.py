"""family: call-kind tell by stack depth (red-team round 20): a pure-Python recursion that
counts the frames left before ``RecursionError``, and a nested list whose ``repr`` does the same
with the interpreter's C recursion, read the depth of the grader's stack at each call. Checked,
timed, clock-check, unseen-input and ghost calls came at depths of their own; a case did half
the work at the timed depths only. Every forward now starts at one depth
(``worker._at_depth``): this probe raises at any call whose depths differ from the first call's,
so it is certified only when no call can be told apart this way. Each call recurses to the
interpreter's limit: on an H100 host (Python 3.12) its timing stage took 95 s, certified
(``cuda_graph``), so it has a limit of its own there."""
# problem: ref_scale_add
# expect: certified
# cuda timeout_s: 180
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, 2.0 * x + y, mask=mask)


def _python_left(k=0):
    try:
        return _python_left(k + 1)
    except RecursionError:
        return k


def _nested_repr_fits(depth):
    nested = []
    for _ in range(depth):
        nested = [nested]
    try:
        repr(nested)
        return True
    except RecursionError:
        return False


def _c_left(high=1 << 15):
    low = 0  # the deepest nested list whose repr fits
    while low < high:
        middle = (low + high + 1) // 2
        if _nested_repr_fits(middle):
            low = middle
        else:
            high = middle - 1
    return low


def _c_is(low):  # as deep in the stack as _c_left's own tests
    return _nested_repr_fits(low) and not _nested_repr_fits(low + 1)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = None

    def forward(self, x, y):
        # the binary search once; later calls test the first call's bound from both sides
        # (cheap enough for the thousands of calls a GPU's timing makes)
        python_left = _python_left()
        if self.first is None:
            self.first = (python_left, _c_left())
        else:
            c_first = self.first[1]
            c_same = _c_is(c_first)
            if python_left != self.first[0] or not c_same:
                depths = (python_left, c_first if c_same else _c_left())
                raise RuntimeError(f"told apart: depths {depths}, first call {self.first}")
        out = torch.empty_like(x)
        n = x.numel()
        scale_add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
        return out
