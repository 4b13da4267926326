"""Threads and processes: Python threads started (counted from the candidate's import on), the
OS threads of this process, and child processes left alive."""
from __future__ import annotations

import os
import threading

from ..guards.originals import _ORIGINALS, _listdir
from .counts import _audit_event


def _count_thread_start(original):
    def start(*args, **kwargs):
        _audit_event("kernelmill.count", "thread_starts", 1)
        return original(*args, **kwargs)
    return start


def _install_thread_hooks() -> None:
    """Count threads started during forward: work done in a joined thread escapes tracing."""
    import _thread

    for owner in (_thread, threading):
        for name in ("start_new_thread", "_start_new_thread", "start_joinable_thread",
                     "_start_joinable_thread"):
            original = owner.__dict__.get(name)
            if original is not None:
                hooked = _count_thread_start(original)
                setattr(owner, name, hooked)
                _ORIGINALS[f"{owner.__name__}.{name}"] = (owner, name, hooked)


# Python-level routes from tensor memory to Python values and back that bypass the dispatcher
# (so neither the op trace nor the profiler sees them): per-element callbacks, conversions to


def _tasks() -> set[str]:
    try:
        return set(_listdir("/proc/self/task"))
    except OSError:
        return set()


def _task_name(tid: str) -> str:
    try:
        with open(f"/proc/self/task/{tid}/comm") as handle:
            return handle.read().strip()
    except OSError:
        return "?"


def _live_children() -> list[int]:
    me, found = str(os.getpid()), []
    for entry in _listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if fields[1].decode() == me and fields[0] not in (b"Z", b"X"):
            found.append(int(entry))
    return found
