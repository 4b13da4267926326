"""A gate on a CUDA stream: work queued behind it waits on the device until the host opens it,
so a span timed by CUDA events around that work starts with the work already queued, and the
host's time to launch it (tens of µs, more right after a large copy from pageable memory) is
not in the reading.

The stream waits (``cuStreamWaitValue32``, a stream memory operation: no kernel, nothing a
profiler counts as the span's work) on a word of page-locked host memory until it holds the
gate's count; ``open`` writes the count. Only for work that runs no Python the host could
block on (a CUDA graph's replay): a synchronize queued behind a closed gate would never end.
And should the host block anyway (a driver that waits for room to queue a launch), a watcher
thread opens a gate left closed ``OPEN_AFTER_S`` (``forced`` counts those: their spans hold
the host's time again, as without a gate).

Worker-side: the standard library and torch only (``ctypes`` on the driver's library).
"""
from __future__ import annotations

import ctypes
import threading

import torch

from .cuda_wait import _driver

# bound at import, before any candidate code runs (as ``validate.measure`` binds its own)
_Stream, _cuda_available = torch.cuda.Stream, torch.cuda.is_available
_SHARED: list = []  # this process's gate, made once (``shared``)

CU_STREAM_WAIT_VALUE_GEQ = 0x0  # (int32_t)(*addr - value) >= 0: a count that only grows
CU_MEMHOSTALLOC_DEVICEMAP = 0x02
OPEN_AFTER_S = 1.0  # the host queues a graph's replay and two events in well under a ms


class StreamGate:
    """``close(stream)`` queues a wait on ``stream``; ``open()`` lets it through. Make with
    ``make`` (None where the driver lacks stream memory operations)."""

    def __init__(self, wait, word, address: int, device_address: int):
        self._wait, self._word = wait, word  # page-locked, never freed (one per process)
        self._value = ctypes.c_uint32.from_address(address)
        self._device_address = device_address
        self._count = 0
        self.closed = False
        self.forced = 0  # gates the watcher opened (``OPEN_AFTER_S``)
        self._changed = threading.Condition()

    @classmethod
    def make(cls) -> StreamGate | None:
        """A gate on this thread's current CUDA context (its word allocated by the driver, no
        PyTorch op), tried once on a stream of its own; None where the driver has no stream
        memory operations or refuses them."""
        driver = _driver()
        if driver is None or not _cuda_available():
            return None
        wait = getattr(driver, "cuStreamWaitValue32_v2", None) or \
            getattr(driver, "cuStreamWaitValue32", None)
        device_pointer = getattr(driver, "cuMemHostGetDevicePointer_v2", None)
        host_alloc = getattr(driver, "cuMemHostAlloc", None)
        if wait is None or device_pointer is None or host_alloc is None:
            return None
        wait.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
        wait.restype = ctypes.c_int
        word = ctypes.c_void_p(0)
        if host_alloc(ctypes.byref(word), ctypes.c_size_t(64), CU_MEMHOSTALLOC_DEVICEMAP) != 0 \
                or not word.value:
            return None
        ctypes.c_uint32.from_address(word.value).value = 0
        mapped = ctypes.c_uint64(0)
        if device_pointer(ctypes.byref(mapped), word, 0) != 0:
            return None
        gate = cls(wait, word, word.value, mapped.value)
        stream = _Stream()
        if not gate.close(stream.cuda_stream):
            return None
        gate.open()
        stream.synchronize()
        threading.Thread(target=gate._watch, name="kernelmill-gate", daemon=True).start()
        return gate

    def close(self, stream: int) -> bool:
        """Queue the wait on the stream with handle ``stream``; whether the driver took it."""
        with self._changed:
            self._count = (self._count + 1) & 0xFFFFFFFF
            if self._wait(ctypes.c_void_p(stream), self._device_address, self._count,
                          CU_STREAM_WAIT_VALUE_GEQ) != 0:
                return False
            self.closed = True
            self._changed.notify()
        return True

    def open(self) -> None:
        """Let the work queued behind the wait through (a store the device's poll reads)."""
        with self._changed:
            self._value.value = self._count
            self.closed = False
            self._changed.notify()

    def _watch(self) -> None:
        with self._changed:
            while True:
                self._changed.wait_for(lambda: self.closed)
                count = self._count
                if not self._changed.wait_for(
                        lambda count=count: not self.closed or self._count != count, OPEN_AFTER_S):
                    self._value.value = count
                    self.closed = False
                    self.forced += 1


def shared() -> StreamGate | None:
    """This process's gate, made at the first call (None where none can be made). A grader's
    worker makes it before its snapshot of the threads it started itself, so the watcher is
    counted as the harness's, and before the candidate's import."""
    if not _SHARED:
        _SHARED.append(StreamGate.make())
    return _SHARED[0]
