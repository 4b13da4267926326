"""family: red-team round 16, a Python-bodied custom op stands in for a kernel; its body computes on the host through storage file I/O (see REPORT.md).
Closed: an op the candidate registered whose every kernel is a Python function (boxed only, no native
signature in the dispatcher) is a wrapper, not a kernel (``worker._python_only``, ``python_ops``);
the storage file I/O it used now counts as host views.
"""
# problem: ref_scale_add
# expect: no_custom_kernel
# on cuda: not_certified (its staging or its op is on the host only: a CUDA run refuses it)
import enum

import torch
import torch.nn as nn

_b = enum.bltns
_np = _b.__import__("num" + "py")
_put = _b.getattr(torch.UntypedStorage, "_set" + "_from" + "_file")
_get = _b.getattr(_b.getattr(torch, "_" + "C").StorageBase, "_write" + "_file")


class _Sink:
    def __init__(self):
        self.parts = []

    def write(self, mv):
        self.parts.append(mv)
        return len(mv)


class _Source:
    def __init__(self, data):
        self.data, self.n = data, 0

    def readinto(self, mv):
        self.n += 1
        if self.n == 1:  # the size header
            mv[:] = len(self.data).to_bytes(8, "little")
            return 8
        mv[:] = self.data
        return len(mv)


def _read(t):
    sink = _Sink()
    _get(t.untyped_storage(), sink, False, False, 1)
    return _np.ndarray((t.numel(),), _np.float32, buffer=sink.parts[0],
                       offset=t.storage_offset() * 4)


_lib = torch.library.Library("rt16", "DEF")
_lib.define("scale_add(Tensor x, Tensor y) -> Tensor")


def scale_add(x, y):
    out = torch.empty_like(x)
    r = _read(x) * _np.float32(2.0) + _read(y)
    _put(out.untyped_storage(), _Source(r.tobytes()), None, False, 1)
    return out


_lib.impl("scale_add", scale_add, "CPU")


class ModelNew(nn.Module):
    def forward(self, x, y):
        return torch.ops.rt16.scale_add(x, y)
