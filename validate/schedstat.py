"""How long a thread has waited, runnable, for a core (``runqueue_wait_ns``), read from the
kernel's scheduler statistics. Standard library only: the worker opens its main thread's file
before it is confined (``hold``), since a confined worker may not open it (Landlock).
"""
from __future__ import annotations

import contextlib
import os
import threading

_open, _pread, _close, _O_RDONLY = os.open, os.pread, os.close, os.O_RDONLY
_get_ident = threading.get_ident
_held: dict[int, int] = {}  # thread ident -> its schedstat file, opened while it could be


def hold() -> None:
    """Open the calling thread's scheduler statistics now and keep them open (a worker's main
    thread, before the sandbox closes ``/proc`` to it). Nothing where the kernel has none."""
    if _get_ident() not in _held:
        with contextlib.suppress(OSError):
            _held[_get_ident()] = _open("/proc/thread-self/schedstat", _O_RDONLY)


def runqueue_wait_ns() -> int | None:
    """Nanoseconds the calling thread has spent runnable but not run, waiting for a core that
    other threads of the host held (``/proc/thread-self/schedstat``'s second field); None where
    it cannot be read. A call's wall time less what this grew by is what it would have taken
    with a core to itself: its own work and its own waits (a sleep stays in)."""
    fd, opened = _held.get(_get_ident()), False
    if fd is None:
        try:
            fd, opened = _open("/proc/thread-self/schedstat", _O_RDONLY), True
        except OSError:
            return None
    try:
        fields = _pread(fd, 128, 0).split()
        return int(fields[1]) if len(fields) >= 2 else None
    except (OSError, ValueError):
        return None
    finally:
        if opened:
            _close(fd)
