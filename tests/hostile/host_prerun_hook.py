"""family: red-team round 9, host compute inside a launch: the kernel's pre-run hook (run by the Triton interpreter on its host copies of the arguments) computes the answer in NumPy; the kernel itself does nothing.
Closed: host access inside an interpreted launch is excused only for the interpreter's and the harness's own frames (``_origin``); the submission's hook is the submission's."""
# host_prerun_hook: Triton's interpreter calls a JIT function's pre-run hooks with its HOST
# copies of the arguments, then runs the program, then copies every host copy back over the
# argument tensors. The hook is the submission's own code, running while the harness marks the
# call "in a launch": host access there is excused in interpreted mode (the interpreter's own
# copies), and NumPy arithmetic is no torch op, so the op trace sees nothing. The kernel body
# stores nothing; the copy-back delivers the NumPy answer into `out`. The ghost call skips the
# launch (and the hook with it), so it sees an empty output and passes.
# problem: ref_scale_add
# expect: not_certified
import enum

import torch
import torch.nn as nn
import triton
import triton.language as tl

_b = enum.bltns
_NP = "num" + "py"


@triton.jit
def scale_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)  # noqa: F841 -- the body computes nothing


def _hook(x, y, out, n, **kwargs):
    o = _b.getattr(out, _NP)()
    o[:] = 2.0 * _b.getattr(x, _NP)() + _b.getattr(y, _NP)()


scale_add_kernel.add_pre_run_hook(_hook)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        scale_add_kernel[(1,)](x, y, out, n, BLOCK=1024)
        return out
