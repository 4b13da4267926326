"""family: red-team round 16, host compute through a memoryview that a storage read hands a file object's readinto (see REPORT.md).
Closed on CPU for calls through ``torch.UntypedStorage``/``TypedStorage``: their file reads and
writes count as host views from the import on. A call through ``torch._C.StorageBase`` itself (an
immutable type) is not hooked; on CUDA the answer must cross to the host and back, which the
device-to-host copy count in each call catches, whatever the route.
"""
# problem: ref_scale_add
# expect: host_compute
# on cuda: not_certified (its staging or its op is on the host only: a CUDA run refuses it)
import enum

import torch
import torch.nn as nn
import triton
import triton.language as tl

_b = enum.bltns
_np = _b.__import__("num" + "py")
_fill = _b.getattr(torch.UntypedStorage, "_set" + "_from" + "_file")


@triton.jit
def mark_kernel(f_ptr, BLOCK: tl.constexpr):
    o = tl.arange(0, BLOCK)
    tl.store(f_ptr + o, tl.full((BLOCK,), 1, tl.int32))


class _Grab:
    def __init__(self, nbytes):
        self.nbytes, self.views = nbytes, []

    def readinto(self, mv):
        self.views.append(mv)
        if len(self.views) == 1:  # the size header
            mv[:] = int(self.nbytes).to_bytes(8, "little")
            return 8
        return len(mv)  # the data: left as it is


def _view(t, dtype):
    st = t.untyped_storage()
    g = _Grab(st.nbytes())
    _fill(st, g, None, False, 1)
    return _np.ndarray((t.numel(),), dtype, buffer=g.views[1],
                       offset=t.storage_offset() * t.element_size())


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.flag = torch.zeros(16, dtype=torch.int32)
        self.fn = _view(self.flag, _np.int32)

    def forward(self, x, y):
        out = torch.empty_like(x)
        self.fn[0] = 0
        mark_kernel[(1,)](self.flag, BLOCK=16)
        if self.fn[0] != 1:  # the ghost call: our launch was skipped
            return out
        xn, yn, on = (_view(t, _np.float32) for t in (x, y, out))
        _np.multiply(xn, 2.0, out=on)
        _np.add(on, yn, out=on)
        return out
