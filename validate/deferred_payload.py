"""A worker started before its payload exists (``run_in_worker(payload=DeferredPayload())``).

A grade's candidate worker needs the reference run's weights and inputs, yet spends its first
second or two on what needs none of them: its process, its CUDA context (under the GPU's lock),
its confinement. Started beside the reference run, it does that meanwhile, then waits for the
rest of its job: the payload (its large tensors in a sealed memory file, as ``_tensor_file``
makes it for any run) and its late parts' table, handed over one socket the worker holds from
its start, the file's descriptor with the first bytes (``SCM_RIGHTS``). Nothing of the
submission runs before: the worker imports its target only once the payload is in.

The worker's time limit does not run while it waits, from its hello on: the wait is the
parent's (``waiting_s``), credited apart from its waits for the GPU; its start is its own. A
payload withdrawn (``cancel``: the reference run failed, or the job turned out to need another
start) closes the socket; the worker reads its end and exits, its run failing at
``payload wait``.
"""
from __future__ import annotations

import os
import pickle
import socket
import struct
import threading
import time

_HEADER = struct.Struct("<QB")  # the payload's length, whether a tensor file comes with it


class DeferredPayload:
    """A payload given after its worker started (``give``), or withdrawn (``cancel``)."""

    def __init__(self):
        self._ready = threading.Event()
        self._lock = threading.Lock()
        self.payload: dict | None = None
        self.late: list | None = None
        self.cancelled = False
        self.started_at: float | None = None  # when its run began waiting (its spawn)
        self.given_at: float | None = None  # when it was given or withdrawn

    def give(self, payload: dict, late: list | None = None) -> bool:
        """Hand ``payload`` (and ``late``, as ``run_in_worker(late=...)``) to the worker; False
        when it was withdrawn or given already."""
        with self._lock:
            if self._ready.is_set():
                return False
            self.payload, self.late = payload, late
            self.given_at = time.monotonic()
            self._ready.set()
            return True

    def cancel(self) -> bool:
        """Withdraw it: the worker ends without running its target. False when given already."""
        with self._lock:
            if self._ready.is_set():
                return False
            self.cancelled = True
            self.given_at = time.monotonic()
            self._ready.set()
            return True

    def wait(self, timeout: float | None = None) -> bool:
        return self._ready.wait(timeout)

    @property
    def pending(self) -> bool:
        return not self._ready.is_set()

    def waiting_s(self, ready_at: float | None = None) -> float:
        """How long the worker waited for it (so far) since it was ready for it (``ready_at``,
        its hello; None: not yet, and nothing waited): the parent's time, not the run's. Its
        own start is its own, as any worker's."""
        if ready_at is None:
            return 0.0
        end = self.given_at if self.given_at is not None else time.monotonic()
        return max(0.0, end - ready_at)


def send_payload(sock: socket.socket, blob: bytes, tensor_fd: int | None) -> None:
    """The payload's bytes (a pickle) over ``sock``, the tensor file's descriptor (if any) with
    its first bytes."""
    header = _HEADER.pack(len(blob), tensor_fd is not None)
    socket.send_fds(sock, [header], [tensor_fd] if tensor_fd is not None else [])
    sock.sendall(blob)


def receive_payload(fd: int) -> tuple[bytes, int | None]:
    """The worker's side: the payload's bytes and the tensor file's descriptor (None: none came
    with it). Raises ``EOFError`` where the parent withdrew it (its end closed first)."""
    sock, fds = socket.socket(fileno=fd), []
    try:
        data, fds, _flags, _addr = socket.recv_fds(sock, _HEADER.size, 4)
        while data and len(data) < _HEADER.size:
            more = sock.recv(_HEADER.size - len(data))
            if not more:
                break
            data += more
        if len(data) < _HEADER.size:
            raise EOFError("the payload was withdrawn before the worker ran")
        size, with_file = _HEADER.unpack(data)
        chunks, left = [], size
        while left:
            chunk = sock.recv(min(left, 1 << 20))
            if not chunk:
                raise EOFError("the payload was cut short")
            chunks.append(chunk)
            left -= len(chunk)
        # the tensor file, where one was said to come: any other descriptor is closed
        tensor_fd = fds.pop(0) if with_file and fds else None
        return b"".join(chunks), tensor_fd
    finally:
        for extra in fds:
            os.close(extra)
        sock.close()


def payload_part(payload: dict, late_table) -> bytes:
    """What the worker gets for its payload: the job's part that waited (``payload`` with its
    tensors in slots, its late parts' table)."""
    return pickle.dumps({"payload": payload, "late": late_table},
                        protocol=pickle.HIGHEST_PROTOCOL)
