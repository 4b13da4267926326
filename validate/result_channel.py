"""The parent's end of a worker's result channel: a thread that reads and authenticates the
HMAC-signed frames (``_Reader``: hello, stage marks, reports, the result or the error), the
memory file a result frame's data (or a trusted run's results delivered before its end) lands
in (``_FrameFile``) and its decoding with
``torch.load(weights_only=True)`` (``_decode``). Split out of ``validate.harness``, which
re-exports these names.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import io
import json
import mmap
import os
import re
import threading
import time
from typing import TYPE_CHECKING

from .harness_worker import (
    HEADER,
    KIND_DELIVERED,
    KIND_ERROR,
    KIND_HELLO,
    KIND_REPORT,
    KIND_RESULT,
    KIND_STAGE,
    MAC_SIZE,
)

if TYPE_CHECKING:
    from .worker_control import Control

MAX_FRAME = 4 << 30  # 4 GiB: larger claims are treated as a broken channel
# Frames other than the result (hello, stage marks, reports, the error) are small: each at most
# SMALL_FRAME bytes and SMALL_TOTAL together per run, or the channel is broken (``tampered``).
# The frames are signed in the worker's process, where a submission's code runs too: a signed
# frame's size is no promise (a submission can send huge stage names to grow the parent).
SMALL_FRAME = 1 << 20
SMALL_TOTAL = 64 << 20
STAGE_NAME_CHARS = 200


class _Reader(threading.Thread):
    """Reads and authenticates frames; stamps each with the parent's clock."""

    def __init__(self, fd: int, key: bytes, start: float, control: Control | None = None,
                 on_delivered=None):
        super().__init__(daemon=True)
        self.fd, self.key, self.start_time, self.control = fd, key, start, control
        # ``on_delivered(data, at)``: a trusted run's results before its end (one frame, once;
        # from a run not asked for them, the frame breaks the channel)
        self.on_delivered = on_delivered
        self.delivered = False
        self.stages: list[tuple[str, float]] = []
        # (stage, the worker's CPU seconds at its mark): what the worker says, for the profile
        self.stage_cpu: list[tuple[str, float]] = []
        self.result: bytes | _FrameFile | None = None
        self.error: dict | None = None
        self.hello = False
        self.hello_at: float | None = None  # when it came (``time.monotonic``)
        self.sandbox: int | None = None
        self.tampered = False
        self.final_at: float | None = None
        self.small_bytes = 0  # bytes of frames other than the result so far (SMALL_TOTAL)
        self.reports: list[dict] = []  # reports of a run without a control pipe, as they came
        self.start_marks: list[tuple[str, float]] = []  # the worker's stages before its hello

    def _read_exact(self, n: int, file: bool = False):
        """``n`` bytes read straight into one buffer (None at end of stream). The buffer is a
        mapping: its pages take memory only as bytes arrive, so a forged header that claims
        gigabytes costs nothing until they are sent. With ``file`` (a result's data) the
        buffer is a ``_FrameFile``, which ``_decode`` maps instead of copying."""
        if n == 0:
            return b""
        holder = _FrameFile(n) if file and hasattr(os, "memfd_create") else None
        buffer = holder.map if holder is not None else mmap.mmap(-1, n)
        done = holder.splice_from(self.fd) if holder is not None else 0
        with memoryview(buffer) as view:
            while done < n:
                got = os.readv(self.fd, [view[done:done + (1 << 22)]])
                if not got:
                    break
                done += got
        if done < n:
            if holder is not None:
                holder.close()
            return None
        return holder if holder is not None else buffer

    def run(self) -> None:
        try:
            self._loop()
        finally:
            os.close(self.fd)

    def _loop(self) -> None:
        final = False
        while True:
            header = self._read_exact(HEADER.size + MAC_SIZE)
            if header is None:
                return
            (length,) = HEADER.unpack(header[:HEADER.size])
            if length == 0 or length > MAX_FRAME:
                self.tampered = True
                return
            kind = self._read_exact(1)
            kind = bytes(kind[:1]) if kind is not None else None
            large = kind == KIND_RESULT or (kind == KIND_DELIVERED and
                                            self.on_delivered is not None and not self.delivered)
            if not large:
                self.small_bytes += length
                if length - 1 > SMALL_FRAME or self.small_bytes > SMALL_TOTAL:
                    self.tampered = True
                    return
            # a result's data goes to a file-backed buffer; the rest is small
            body = self._read_exact(length - 1, file=large)
            if body is None:
                self.tampered = True  # a truncated frame is not something the harness writes
                return
            mac = hmac.new(self.key, kind, hashlib.sha256)
            mac.update(body.map if isinstance(body, _FrameFile) else body)
            if not hmac.compare_digest(mac.digest(), header[HEADER.size:]) or final:
                if isinstance(body, _FrameFile):
                    body.close()
                self.tampered = True
                return
            data = body if large else bytes(body)
            now = time.monotonic() - self.start_time
            if kind == KIND_HELLO:
                self.hello = True
                self.hello_at = self.start_time + now  # (``time.monotonic``)
                hello = json.loads(data)
                self.sandbox = hello.get("sandbox")
                self.start_marks = _start_marks(hello.get("marks"), self.start_time, now)
            elif kind == KIND_STAGE:
                mark = json.loads(data)
                self.stages.append((str(mark["stage"])[:STAGE_NAME_CHARS], now))
                cpu = mark.get("cpu")
                if type(cpu) in (int, float) and 0 <= cpu < 1e7:
                    self.stage_cpu.append((self.stages[-1][0], float(cpu)))
            elif kind == KIND_RESULT:
                self.result, final, self.final_at = data, True, now
            elif kind == KIND_ERROR:
                self.error, final, self.final_at = json.loads(data), True, now
            elif kind == KIND_DELIVERED and large:
                self.delivered = True
                self.on_delivered(data, now)
            elif kind == KIND_REPORT:
                try:
                    value = json.loads(data)
                except ValueError:
                    value = None
                if not isinstance(value, dict):
                    self.tampered = True
                    return
                if self.control is not None:
                    self.control._deliver(value)
                else:  # kept: what the worker said when it saw it, whatever it reports later
                    self.reports.append(value)
            else:
                self.tampered = True
                return
            # hold nothing while blocked on the next frame: a result's file is the run's to let go
            # (``self.result``), not this thread's until the worker's end of the pipe closes
            body = data = None


def _start_marks(marks, start: float, hello: float) -> list[tuple[str, float]]:
    """The worker's stages before its hello (when its main began, its CUDA initialisation, its
    confinement), stamped by the host's monotonic clock, which this process shares: each as
    seconds since the run's start, within the start and the hello (a malformed list: none)."""
    if not isinstance(marks, list):
        return []
    stages = []
    for mark in marks[:8]:
        if isinstance(mark, list) and len(mark) == 2 and isinstance(mark[0], str) and \
                isinstance(mark[1], (int, float)):
            stages.append((mark[0][:STAGE_NAME_CHARS], min(max(0.0, mark[1] - start), hello)))
    return stages


def _widen_pipe(fd: int, size: int = 1 << 20) -> None:
    """A 1 MiB pipe (Linux's default ceiling for users) instead of 64 KiB: gigabyte results
    and jobs cross in fewer wake-ups (600 MB: 1.0 s -> 0.6 s on a 2-core machine)."""
    try:
        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), size)
    except OSError:
        pass  # over the machine's pipe-max-size, or not Linux: the default works


class _FrameFile:
    """A result frame's data in an anonymous memory file (``memfd``), mapped for the reader to
    fill. ``torch.load(mmap=True)`` maps its tensors from it instead of copying them: copying
    holds the interpreter lock (a 320 MB result: 1 s in which no other thread of the grader
    ran, and on an H100 the parent's clock read an honest group member 2-3.6x slow)."""

    def __init__(self, n: int):
        self.fd = os.memfd_create("kernelmill-result", getattr(os, "MFD_CLOEXEC", 1))
        os.ftruncate(self.fd, n)
        self.map = mmap.mmap(self.fd, n)

    def __len__(self) -> int:
        return len(self.map)

    def splice_from(self, pipe: int) -> int:
        """Fill the file from ``pipe`` in the kernel (``splice``), as far as it goes; returns
        the bytes filled (the caller reads the rest, if any, through the mapping). Half the
        reader's CPU time of filling the mapping by ``readv`` (256 MB: 130 ms against 250 on a
        2-core host): no page faults on fresh pages of the mapping."""
        n, done = len(self.map), 0
        splice = getattr(os, "splice", None)
        while splice is not None and done < n:
            try:
                got = splice(pipe, self.fd, n - done, offset_dst=done)
            except OSError:  # not a pipe, or a kernel without it: readv does the rest
                break
            if not got:
                break
            done += got
        return done

    def load(self):
        import torch

        try:
            with _slots_allowed(torch):
                return torch.load(f"/proc/self/fd/{self.fd}", weights_only=True,
                                  map_location="cpu", mmap=True)
        finally:
            self.close()

    def __del__(self):
        self.close()

    def close(self) -> None:
        if getattr(self, "fd", None) is not None:
            self.map.close()
            os.close(self.fd)
            self.fd = None


def _decode(data) -> dict:
    import torch

    if isinstance(data, _FrameFile):
        value = data.load()
    else:
        with _slots_allowed(torch):
            value = torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    if not isinstance(value, dict):
        raise TypeError(f"expected a dict, got {type(value).__name__}")
    return value


def undecodable(exc: BaseException) -> str:
    """One line for a result its ``weights_only`` load refused (``_decode``): the global it
    held, where the refusal names one (torch's message runs to ten lines), else the
    exception's first line."""
    text = str(exc)
    found = re.search(r"Unsupported global: GLOBAL ([\w.]+)", text)
    if found:
        return (f"result not decodable: it holds {found.group(1)}, which a worker's result "
                "may not (tensors, numbers, strings, dtypes and sizes, in lists, tuples and "
                "dicts)")
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return f"result not decodable: {first[:300]}"


def _slots_allowed(torch):
    """``TensorSlot`` and ``ShownSlot`` among the classes a result's ``weights_only`` load may build (a tuple of
    numbers and a dtype name: the slots of tensors sent in the run's results file), for the
    whole process: ``torch.serialization.safe_globals`` restores the list when it exits, which
    another grading thread's load in progress then no longer finds."""
    from .tensor_slots import ShownSlot, TensorSlot

    allowed = torch.serialization.get_safe_globals()
    missing = [kind for kind in (TensorSlot, ShownSlot) if kind not in allowed]
    if missing:
        torch.serialization.add_safe_globals(missing)
    return contextlib.nullcontext()
