"""family: the harness's own copies decided by the submission (a kernel of its own registered
for an aten op the harness's copies and clones run through: ``torch.library.Library("aten",
"IMPL")``). A clone that hands back the last captured call's output for every earlier one makes
a graph whose calls each compute a slice read as calls that agree; this one passes the copy
through, and is still a replaced function: the registrations of the ops the harness's copies
run through are read before the import and again after the window and at the end
(``grade/worker/guards/dispatch.py``)."""
# problem: ref_scale_add
# expect: patched_function
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


class ModelNew(nn.Module):
    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        scale_add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
        return out


_lib = torch.library.Library("aten", "IMPL")


def _clone(x, memory_format=None):
    out = torch.empty_like(x)
    out.copy_(x)
    return out


_lib.impl("clone", _clone, "CPU")
_lib.impl("clone", _clone, "CUDA")
