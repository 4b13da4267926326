"""Memory files that carry a job's tensors to a worker: the sealed file of a payload's large
CPU tensors (``_tensor_file``) and the file of late data written part by part when the worker
asks (``_LateFile``). Split out of ``validate.harness``, which re-exports these names.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import pickle
import sys
import threading

from .tensor_slots import (  # noqa: F401 (_SEALS, TensorSlot: re-exported)
    _SEALS,
    TensorSlot,
    _seal_bits,
    passed_on,
    plain_cpu_tensor,
    pwrite_range,
    slotted,
    write_chunks,
)

SHARED_TENSOR_BYTES = 1 << 16  # smaller tensors travel in the job's pickle


def _tensor_file(payload):
    """``payload`` with its large CPU tensors replaced by ``TensorSlot``s, and a sealed memory
    file holding their bytes (its descriptor, or None when there are none or no ``memfd``).

    Pickling a tensor copies it three times while holding the interpreter lock: a 640 MB
    payload took 3.5 s and stalled the grader's other threads (window clocks among them) 0.2 s
    at a time, and the worker spent 2 s unpickling it. Writing it here takes 0.2 s with the
    lock released, and the worker maps it. The file is sealed before any worker sees it:
    nobody can change it, so a worker's copy-on-write mapping is all it can touch. A tensor
    that is not contiguous keeps its strides through the pickle instead. Tensors that all lie
    in one trusted run's shown file (``tensor_slots.SealedFile``) are not copied: that file,
    sealed already, is the payload's file."""
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(os, "memfd_create"):
        # a process that never imported torch holds no tensor to move (importing it here
        # cost a process that sends only text, the mine stage's, seconds of its main thread)
        return payload, None

    def shareable(v) -> torch.Tensor | None:
        return v if (plain_cpu_tensor(v, torch)
                     and v.numel() * v.element_size() >= SHARED_TENSOR_BYTES) else None

    # tensors that all lie in one trusted run's sealed shown file (a reference run's inputs and
    # weights for this candidate): that file, passed on as it is
    given = passed_on(payload, lambda v: shareable(v) is not None)
    if given is not None:
        return given
    moved, chunks, end = slotted(payload, shareable)
    if not chunks:
        return payload, None
    fd = os.memfd_create("kernelmill-payload", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        write_chunks(fd, chunks, end, torch)
        fcntl.fcntl(fd, getattr(fcntl, "F_ADD_SEALS", 1033), _seal_bits())
    except BaseException:
        os.close(fd)
        raise
    return moved, fd


# A late part is written inside a timing window while the worker waits for it: a large one in
# pieces by several threads at once (``os.pwrite`` copies into the file's pages without the GIL).
# One thread wrote 85-136 ms of a KernelBench grade's window at the mean (H200 host).
WRITE_PIECE_BYTES = 16 << 20
WRITE_THREADS = 4


def pwrite_all(fd: int, view: memoryview, offset: int) -> None:
    """All of ``view`` written to ``fd`` at ``offset``: by this thread when it is at most two
    pieces of ``WRITE_PIECE_BYTES``, else in such pieces by ``WRITE_THREADS`` threads of its own
    (a pool per write: one window's large part never queues behind another's). Returns, or
    raises, only once no thread writes to ``fd`` any more (it may be closed, and its number
    given to another file, right after)."""
    if len(view) <= 2 * WRITE_PIECE_BYTES:
        pwrite_range(fd, view, offset)
        return
    from concurrent.futures import ThreadPoolExecutor

    starts = range(0, len(view), WRITE_PIECE_BYTES)
    with ThreadPoolExecutor(WRITE_THREADS, "kernelmill-late-write") as pool:
        futures = [pool.submit(pwrite_range, fd, view[a:a + WRITE_PIECE_BYTES], offset + a)
                   for a in starts]
    # the pool's exit waited for every piece submitted, whatever happened on the way
    for future in futures:
        future.result()


class _LateFile:
    """Data a worker may not hold before it uses it, in parts, in a memory file passed to the
    worker empty: part ``i`` is written when the worker asks for it (``write``).

    Anything in a worker's memory is within its submission's reach (native code reads any
    address; ``/proc/self/map_files`` maps any memory file again): a submission could read the
    inputs of the unseen-input check from the job's tensor file at import and have every answer
    ready (T-14). So each unseen input arrives just before its own call. The file is sealed against
    resizing (the worker cannot take its pages away). A part: 8 bytes giving its pickle's
    length, the pickle (every tensor a ``TensorSlot``, offsets from the part's start), the
    tensors' bytes. ``table``: each part's (offset, size), for the worker."""

    def __init__(self, parts: list):
        import torch

        self.table: list[tuple[int, int]] = []
        self._parts: list[tuple[bytes, list]] = []
        end = 0
        for part in parts:
            moved, chunks, size = slotted(
                part, lambda v: v.detach().to("cpu").contiguous() if type(v) is torch.Tensor
                else None)
            structure = pickle.dumps(moved, protocol=pickle.HIGHEST_PROTOCOL)
            head = -(-(8 + len(structure)) // 64) * 64
            self._parts.append((len(structure).to_bytes(8, "little") + structure,
                                [(head + offset, tensor) for offset, tensor in chunks]))
            self.table.append((end, head + size))
            end += head + size
        self.fd = os.memfd_create("kernelmill-late", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(self.fd, max(end, 1))
            # its pages allocated now, before any window: written on request, inside a timing
            # window, they cost a copy only (a first write of 128 MB took 61 ms, 15 ms after)
            with contextlib.suppress(OSError, AttributeError):
                os.posix_fallocate(self.fd, 0, max(end, 1))
            fcntl.fcntl(self.fd, getattr(fcntl, "F_ADD_SEALS", 1033),
                        getattr(fcntl, "F_SEAL_SHRINK", 2) | getattr(fcntl, "F_SEAL_GROW", 4)
                        | getattr(fcntl, "F_SEAL_SEAL", 1))
            self._writer: int | None = os.dup(self.fd)  # ours: ``fd`` is closed once passed
        except BaseException:
            os.close(self.fd)
            raise
        self._lock = threading.Lock()

    def write(self, index: int) -> None:
        import torch

        with self._lock:
            if self._writer is None or not 0 <= index < len(self._parts):
                return
            base = self.table[index][0]
            head, chunks = self._parts[index]
            self._parts[index] = (b"", [])  # written once
            os.pwrite(self._writer, head, base)
            for offset, tensor in chunks:
                with memoryview(tensor.reshape(-1).view(torch.uint8).numpy()) as view:
                    pwrite_all(self._writer, view, base + offset)

    def close(self) -> None:
        with self._lock:
            if self._writer is not None:
                os.close(self._writer)
                self._writer = None
