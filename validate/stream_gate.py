"""A gate on a CUDA stream: work queued behind it waits on the device until the host opens it,
so a span timed by CUDA events around that work starts with the work already queued, and the
host's time to launch it (tens of µs, more right after a large copy from pageable memory) is
not in the reading.

The stream waits (``cuStreamWaitValue32``, a stream memory operation: no kernel, nothing a
profiler counts as the span's work) on a word of page-locked host memory until it holds the
gate's count; ``open`` writes the count. Only for work whose launch the host does not block on
(a CUDA graph's replay, two events): a synchronize queued behind a closed gate would never end.

The grader's worker holds its gate in its private copy of this module (``shared``, made before
the candidate's import: ``grade.worker.guards.private``), and the gate reaches the driver and
its word only through what it bound when it was made, so no submission's code runs between a
gate's closing and its opening.

Worker-side: the standard library and torch only (``ctypes`` on the driver's library).
"""
from __future__ import annotations

import ctypes

import torch

from .cuda_wait import _driver, own_function

# bound at import, before any candidate code runs (as ``validate.measure`` binds its own)
_Stream, _cuda_available = torch.cuda.Stream, torch.cuda.is_available
# C functions: no Python a submission could rebind runs between the inputs' load and the span
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
_device_index = getattr(torch._C, "_cuda_getDevice", None)
_set_word = ctypes._SimpleCData.value.__set__  # the C setter: no class attribute in between
_SHARED: list = []  # this process's gate, made once (``shared``)

CU_STREAM_WAIT_VALUE_GEQ = 0x0  # (int32_t)(*addr - value) >= 0: a count that only grows
CU_MEMHOSTALLOC_PORTABLE, CU_MEMHOSTALLOC_DEVICEMAP = 0x01, 0x02
_WAIT_ARGS = (ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint)


class StreamGate:
    """``close(stream)`` queues a wait on ``stream``; ``open()`` lets it through. Make with
    ``make`` (None where the driver lacks stream memory operations)."""

    __slots__ = ("_count", "_device_address", "_wait", "_word", "closed")

    def __init__(self, wait, word, device_address: int):
        self._wait = wait  # a function pointer of its own, not the driver library's attribute
        self._word = word  # page-locked, never freed (one gate per process)
        self._device_address = device_address
        self._count = 0
        self.closed = False

    @classmethod
    def make(cls) -> StreamGate | None:
        """A gate on this thread's current CUDA context (its word allocated by the driver, no
        PyTorch op), tried once on a stream of its own; None where the driver has no stream
        memory operations or refuses them."""
        driver = _driver()
        if driver is None or not _cuda_available():
            return None
        wait = own_function(ctypes.c_int, _WAIT_ARGS, "cuStreamWaitValue32_v2",
                            "cuStreamWaitValue32")
        device_pointer = getattr(driver, "cuMemHostGetDevicePointer_v2", None)
        host_alloc = getattr(driver, "cuMemHostAlloc", None)
        free_host = getattr(driver, "cuMemFreeHost", None)
        if wait is None or device_pointer is None or host_alloc is None or free_host is None:
            return None
        address = ctypes.c_void_p(0)
        if host_alloc(ctypes.byref(address), ctypes.c_size_t(64),
                      CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP) != 0 or \
                not address.value:
            return None
        word = ctypes.c_uint32.from_address(address.value)
        _set_word(word, 0)
        mapped = ctypes.c_uint64(0)
        if device_pointer(ctypes.byref(mapped), address, 0) != 0:
            free_host(address)
            return None
        gate = cls(wait, word, mapped.value)
        stream = _Stream()
        if not gate.close(stream.cuda_stream):
            free_host(address)
            return None
        gate.open()
        stream.synchronize()
        return gate

    def close(self, stream: int) -> bool:
        """Queue the wait on the stream with handle ``stream``; whether the driver took it."""
        count = (self._count + 1) & 0xFFFFFFFF
        if self._wait(stream, self._device_address, count, CU_STREAM_WAIT_VALUE_GEQ) != 0:
            return False
        self._count, self.closed = count, True
        return True

    def open(self) -> None:
        """Let the work queued behind the wait through (a store the device's poll reads)."""
        _set_word(self._word, self._count)
        self.closed = False


def current_stream() -> int | None:
    """The calling thread's current CUDA stream's handle on the current device, read through
    C functions bound at import (None where this build has none)."""
    if _raw_stream is None or _device_index is None:
        return None
    return _raw_stream(_device_index())


def shared() -> StreamGate | None:
    """This process's gate, made at the first call (None where none can be made). A grader's
    worker makes it before the candidate's import, in its private copy of this module."""
    if not _SHARED:
        _SHARED.append(StreamGate.make())
    return _SHARED[0]
