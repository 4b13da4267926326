"""Host memory page-locked for a while, read-only, so a device's copy engine reads it directly
(``cuMemHostRegister`` with the read-only flag), then let go: the unseen check's inputs come in a
late part mapped from the parent's sealed file, and their copy onto the device from those
pageable pages took 47-198 ms of the exclusive window at KernelBench's sizes (H100).

``lock(tensors)`` registers each host tensor of ``LOCK_MIN_BYTES`` or more (its pages, rounded
out to whole ones, ranges that share a page merged: tensors in a late part sit 64 bytes apart)
and returns the call that unregisters them. The driver's functions are bound by ``bind``, which
the grader's worker calls in its private copy of this module before the candidate's import:
what it holds no submission reaches, and nothing else is locked.

Worker-side: the standard library and torch only (``ctypes`` on the driver's library).
"""
from __future__ import annotations

import ctypes
import mmap
from collections.abc import Callable

import torch

from .cuda_wait import own_function

LOCK_MIN_BYTES = 16 << 20  # smaller tensors cost their registration more than they save
CU_MEMHOSTREGISTER_PORTABLE, CU_MEMHOSTREGISTER_READ_ONLY = 0x01, 0x08
_PAGE = mmap.PAGESIZE
# bound at import from the C base class: no method a submission could set on ``torch.Tensor``
# runs on the new inputs before their load
_Tensor, _type, _Base = torch.Tensor, type, torch._C.TensorBase
_data_ptr, _numel, _element_size = _Base.data_ptr, _Base.numel, _Base.element_size
_is_contiguous, _is_cpu = _Base.is_contiguous, _Base.is_cpu.__get__


_BOUND: list = []  # (register, unregister): function pointers of this module's own (``bind``)


def bind() -> bool:
    """Bind the driver's register and unregister as function pointers of this module's own
    (once); whether it could."""
    if not _BOUND:
        register = own_function(ctypes.c_int, (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint),
                                "cuMemHostRegister_v2")
        unregister = own_function(ctypes.c_int, (ctypes.c_void_p,), "cuMemHostUnregister")
        if register is None or unregister is None:
            return False
        _BOUND.append((register, unregister))
    return True


def lock(tensors: list) -> Callable[[], int]:
    """Page-lock the pages under each host tensor in ``tensors`` of ``LOCK_MIN_BYTES`` or
    more (ranges that share a page merged into one); returns the call that lets them go (how
    many ranges it had held). Nothing is locked where ``bind`` was not called or could not
    bind, or the driver refuses (no CUDA, an older driver): the copies read pageable memory,
    as without it. A raise part-way lets go of what it had locked."""
    if not _BOUND:
        return lambda: 0
    register, unregister = _BOUND[0]
    ranges = []
    for value in tensors:
        if _type(value) is not _Tensor or not _is_cpu(value):
            continue
        nbytes = _numel(value) * _element_size(value)
        if nbytes < LOCK_MIN_BYTES or not _is_contiguous(value):
            continue
        address = _data_ptr(value)
        ranges.append((address // _PAGE * _PAGE, -(-(address + nbytes) // _PAGE) * _PAGE))
    merged: list[list[int]] = []
    for start, end in sorted(ranges):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    held: list[int] = []

    def release() -> int:
        for start in held:
            unregister(start)
        count = len(held)
        held.clear()
        return count

    try:
        for start, end in merged:
            if register(start, end - start,
                        CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_READ_ONLY) == 0:
                held.append(start)
    except BaseException:
        release()
        raise
    return release
