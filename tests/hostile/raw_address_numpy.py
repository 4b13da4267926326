"""family: host compute through a raw address of tensor memory (red-team round 18): NumPy views
built from ``data_ptr()`` by the array-interface protocol (no tensor method but ``data_ptr``, no
ctypes) compute the answer; a one-program flag kernel tells the ghost call. Closed by counting a
host ``data_ptr`` handed to the submission's code as a host view (``host_compute``)."""
# problem: ref_scale_add
# expect: host_compute
# on cuda: not_certified (its tensors are on the host: a CUDA Triton launch refuses them)
import enum

import torch
import torch.nn as nn
import triton
import triton.language as tl

_b = enum.bltns
_np = _b.__import__("num" + "py")
_KEY = "__array_" + "interface__"


@triton.jit
def mark_kernel(f_ptr, BLOCK: tl.constexpr):
    o = tl.arange(0, BLOCK)
    tl.store(f_ptr + o, tl.full((BLOCK,), 1, tl.int32))


def _view(t, typestr):
    """A writable NumPy array over the tensor's own memory, from its address."""
    holder = _b.type("H", (), {_KEY: {"data": (t.data_ptr(), False), "shape": (t.numel(),),
                                      "typestr": typestr, "version": 3}})()
    return _np.asarray(holder)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.flag = torch.zeros(16, dtype=torch.int32)
        self.fn = _view(self.flag, "<i4")

    def forward(self, x, y):
        out = torch.empty_like(x)
        self.fn[0] = 0
        mark_kernel[(1,)](self.flag, BLOCK=16)
        if self.fn[0] != 1:  # the ghost call: our launch was skipped
            return out
        xn, yn, on = _view(x, "<f4"), _view(y, "<f4"), _view(out, "<f4")
        _np.multiply(xn, 2.0, out=on)
        _np.add(on, yn, out=on)
        return out
