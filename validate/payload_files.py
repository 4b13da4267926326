"""Memory files that carry a job's tensors to a worker: the sealed file of a payload's large
CPU tensors (``_tensor_file``) and the file of late data written part by part when the worker
asks (``_LateFile``). Split out of ``validate.harness``, which re-exports these names.
"""
from __future__ import annotations

import fcntl
import os
import pickle
import socket
import sys
import threading

from .tensor_slots import (  # noqa: F401 (_SEALS, TensorSlot: re-exported)
    _SEALS,
    LATE_PART,
    HeldFile,
    SlotError,
    TensorSlot,
    _replaced,
    _seal_bits,
    _sealed_size,
    file_part_structure,
    part_bytes,
    part_fault,
    passed_on,
    plain_cpu_tensor,
    pwrite_range,
    recv_fds,
    send_fds,
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


class LatePart(HeldFile):
    """A late part a trusted run made (``harness_worker.late_part``), parent side: its memory
    file, sealed against every change, handed on to a worker as it is (``_LateFile``), never
    copied here. Closed when this object goes."""

    def __init__(self, fd: int, size: int):
        super().__init__(fd)
        self.size = size
        self.checked = False  # its structure found fit to hand over (``_LateFile``)

    def __repr__(self) -> str:
        return f"LatePart({self.size} bytes)"


def receive_parts(channel: socket.socket, parts: dict) -> None:
    """Every late part file waiting on ``channel`` (a trusted run's, ``harness_worker.
    late_part``) into ``parts`` (its index -> ``LatePart``), each sealed against every change
    first; ``SlotError`` for a message that is not one part or a file that cannot be sealed."""
    while True:
        try:
            said, fds = recv_fds(channel, 16, 4, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            raise SlotError(f"the run's late parts could not be read ({exc})") from None
        if not said and not fds:
            return  # the worker's end is closed and nothing is left
        try:
            if len(fds) != 1 or len(said) != 4:
                raise SlotError(f"a late part message of {len(said)} bytes and {len(fds)} files")
            size = _sealed_size(fds[0], "late part's file")
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        old = parts.pop(int.from_bytes(said, "little"), None)
        if old is not None:
            old.close()
        parts[int.from_bytes(said, "little")] = LatePart(fds[0], size)


def attach_parts(value, parts: dict):
    """``value`` with each late part's marker (``{LATE_PART: index}``) replaced by that part's
    file from ``parts`` (taken from it: each once); ``SlotError`` for a marker of a part that
    never came."""
    def swap(item):
        if type(item) is not dict or len(item) != 1 or LATE_PART not in item:
            return NotImplemented
        part = parts.pop(item[LATE_PART], None) if type(item[LATE_PART]) is int else None
        if part is None:
            raise SlotError(f"the result names a late part that never came: {item!r}"[:200])
        return part

    return _replaced(value, swap)


class LateRefused(RuntimeError):
    """A late part the worker's own conduct kept from it (``_LateFile.release``)."""


def _refuse_fault(structure: bytes) -> None:
    """``SlotError`` for a late part's structure the candidate's worker would refuse to read
    (``tensor_slots.part_fault`` against ``late_read._PART_GLOBALS``)."""
    from .late_read import _PART_GLOBALS

    fault = part_fault(structure, _PART_GLOBALS)
    if fault is not None:
        raise SlotError(f"an unseen trial cannot be handed to the candidate: {fault}")


class _LateFile:
    """Data a worker may not hold before it uses it, in parts: each part copied into a memory
    file of its own, sealed, and handed to the worker (its descriptor, over a socket the worker
    holds from its start) only when it asks for that part (``release``).

    Anything in a worker's memory is within its submission's reach (native code reads any
    address; ``/proc/self/map_files`` maps any memory file again): a submission could read the
    inputs of the unseen-input check from the job's tensor file at import and have every answer
    ready (T-14). So each unseen input reaches it just before its own call. With ``ahead``
    (the worker runs under Landlock, which keeps it out of every other process's ``/proc``
    entries, the grader's descriptors among them) the parts are copied as the run starts, by a
    thread of their own: inside the timing window the release only passes a descriptor, where a
    KernelBench-size part copied on request took 90-100 ms of the window, twice per grade and
    per group member. Without it a part made here is copied when asked for
    (tests/hostile/late_grader_fd_steal.py); a reference run's own part files
    (``LatePart``) wait among the grader's descriptors either way, as its results file,
    which holds them too without Landlock, always did. A part's file is
    sealed against writes and resizing before it is passed (the worker maps it, privately). A
    part is laid out as ``tensor_slots.write_part`` writes it (its tensors, then its structure).
    A part given as a ``LatePart`` (a trusted run wrote it in its own sealed file) is passed on
    as it is, never copied. A part whose structure holds what the worker's reading refuses
    (``tensor_slots.part_fault``) is refused here first (``SlotError``), before the worker
    starts. ``table``: each part's (offset, size) in its file, for the worker; ``fd``: the
    worker's end of the socket."""

    def __init__(self, parts: list, ahead: bool = True, pair: socket.socket | None = None):
        import torch

        self.table: list[tuple[int, int]] = []
        self._parts: list[tuple[bytes, list]] = []
        made: list[int | None] = []  # a trusted run's part file, passed on as it is
        try:  # a part refused closes what was taken before it
            for part in parts:
                if type(part) is LatePart:
                    if part.fd is None:  # the grader's own slip, said before the worker starts
                        raise ValueError("a late part whose file was closed before its run")
                    if not part.checked:  # once a part: sealed, and handed to each member
                        _refuse_fault(file_part_structure(part.fd, part.size))
                        part.checked = True
                    made.append(os.dup(part.fd))
                    self._parts.append((b"", []))
                    self.table.append((0, part.size))
                    continue
                moved, chunks, size = slotted(
                    part, lambda v: v.detach().to("cpu").contiguous()
                    if type(v) is torch.Tensor else None)
                structure = pickle.dumps(moved, protocol=pickle.HIGHEST_PROTOCOL)
                _refuse_fault(structure)
                tail = part_bytes(structure)
                self._parts.append((tail, [*chunks, (size, tail)]))
                made.append(None)
                self.table.append((0, size + len(tail)))
        except BaseException:
            for fd in made:
                if fd is not None:
                    os.close(fd)
            raise
        if pair is None:
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            self.fd = theirs.detach()  # passed to the worker, then closed here
        else:  # the worker holds its end already (its payload came after its start)
            ours, self.fd = pair, None
        self._socket = ours
        self._files: list[int | None] = made
        self._written = [threading.Event() for _ in self._parts]
        for index, fd in enumerate(made):
            if fd is not None:
                self._written[index].set()
        self._errors: list[BaseException | None] = [None] * len(self._parts)
        self._lock = threading.Lock()
        self._closing = False
        self._filler = threading.Thread(target=self._fill, name="kernelmill-late-fill",
                                        daemon=True) if ahead else None
        if self._filler is not None:
            try:
                self._filler.start()
            except BaseException:
                self._filler = None
                self.close()
                if self.fd is not None:
                    os.close(self.fd)
                raise

    def _fill(self) -> None:
        """Every part into its own file, in order, while the worker starts."""
        for index in range(len(self._parts)):
            if self._closing:
                return
            if not self._written[index].is_set():
                self._make(index)

    def _make(self, index: int) -> None:
        """Part ``index`` into a sealed memory file of its own (``_files``), or its error
        (``_errors``: said when the part is asked for); its tensors are let go either way."""
        import torch

        fd = None
        try:
            _tail, chunks = self._parts[index]
            fd = os.memfd_create("kernelmill-late", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
            os.ftruncate(fd, max(self.table[index][1], 1))
            for offset, tensor in chunks:
                if type(tensor) is bytes:  # the structure, after the tensors
                    os.pwrite(fd, tensor, offset)
                    continue
                with memoryview(tensor.reshape(-1).view(torch.uint8).numpy()) as view:
                    pwrite_all(fd, view, offset)
            fcntl.fcntl(fd, getattr(fcntl, "F_ADD_SEALS", 1033), _seal_bits())
            with self._lock:
                if not self._closing:
                    self._files[index], fd = fd, None
        except BaseException as exc:  # noqa: BLE001 — said when the part is asked for
            self._errors[index] = exc
        finally:
            if fd is not None:
                os.close(fd)
            self._parts[index] = (b"", [])
            self._written[index].set()

    def release(self, index: int) -> None:
        """Hand part ``index`` to the worker (it asked for it): its file once; a part asked for
        again, or one that could not be made, is answered without a file (the worker raises,
        never waits). Waits for the part's copy, or makes it (without ``ahead``); raises where
        it could not be made."""
        if not 0 <= index < len(self._written):
            return
        if self._filler is None and not self._written[index].is_set():
            self._make(index)
        self._written[index].wait()
        with self._lock:
            fd, self._files[index] = self._files[index], None
            closing = self._closing
        if closing:
            if fd is not None:
                os.close(fd)
            return
        try:
            send_fds(self._socket, index.to_bytes(4, "little"), [] if fd is None else [fd],
                     socket.MSG_DONTWAIT)
        except (BrokenPipeError, ConnectionError):
            pass  # the worker's end is gone: it ended, which its run reports
        except BlockingIOError as exc:  # its end holds every part it asked for, unread
            raise LateRefused(f"late part {index} not handed over: the worker left "
                              "its earlier parts unread") from exc
        finally:
            if fd is not None:
                os.close(fd)
        if self._errors[index] is not None:
            raise OSError(f"late part {index} could not be written: {self._errors[index]}")

    def close(self) -> None:
        """The run ended: no part is handed on after this; every file not given is closed once
        the copy in progress, if any, ends."""
        with self._lock:
            self._closing = True
        if self._filler is not None:
            self._filler.join()
        for written in self._written:  # a part the copy never reached: nobody waits for it
            written.set()
        with self._lock:
            files, self._files = self._files, [None] * len(self._files)
        for fd in files:
            if fd is not None:
                os.close(fd)
        self._socket.close()
