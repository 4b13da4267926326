"""One run per target: a ``filelock`` lock file, with the holder's pid beside it.

A build holds ``BUILD/.kernelmill.lock`` and a batch grade holds ``OUT.lock`` for as long as it
runs. A second run on the same target does not wait: it fails at once with one line naming the
holder's pid (from ``LOCK.pid``), so two runs never validate the same problems twice or write
every verdict twice. The lock is the kernel's (``flock`` through the ``filelock`` library): it
goes when its holder exits, however it exits (kill -9 included), so a stale file never blocks
anyone.

    with hold_lock(Path(out) / ".kernelmill.lock", what=f"build folder {out}"):
        ...
"""
from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import filelock

from .errors import KernelmillError

BUILD_LOCK = ".kernelmill.lock"

F = TypeVar("F", bound=Callable[..., Any])


class LockedError(KernelmillError):
    """Another process holds the lock."""

    def __init__(self, what: str, path: Path, pid: int | None):
        self.pid = pid
        holder = f"pid {pid}" if pid else "another process"
        super().__init__(f"{what} is in use by {holder} (lock {path}); wait for it to finish "
                         "or stop it, then rerun")


def _pid_file(path: Path) -> Path:
    return path.with_name(path.name + ".pid")


def _holder(path: Path) -> int | None:
    try:
        text = _pid_file(path).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


@contextmanager
def hold_lock(path: str | os.PathLike, what: str | None = None) -> Iterator[Path]:
    """Hold the lock file ``path`` for the ``with`` block, or raise ``LockedError`` at once.

    ``what`` names the target in the error (default: the lock file's folder or stem). The lock is
    per open file, so the same process taking it twice fails too, as a second run would.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = filelock.FileLock(str(path), timeout=0, thread_local=False)
    try:
        lock.acquire()
    except filelock.Timeout:
        raise LockedError(what or str(path), path, _holder(path)) from None
    try:
        _pid_file(path).write_text(f"{os.getpid()}\n")
        yield path
    finally:
        _pid_file(path).unlink(missing_ok=True)
        lock.release()


def lock_path_for(out: str | os.PathLike) -> Path:
    """The lock file of a single output file: ``OUT.lock`` beside it, the file a link names
    (a run naming the link and one naming the file hold one lock)."""
    out = Path(out).resolve()
    return out.with_name(out.name + ".lock")


def locked(target: Callable[..., tuple[Path, str]]) -> Callable[[F], F]:
    """Decorate a function so that it runs holding the lock ``target(*args, **kwargs)`` names:
    ``target`` returns ``(lock file, what it protects)``."""

    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def inner(*args: Any, **kwargs: Any) -> Any:
            path, what = target(*args, **kwargs)
            with hold_lock(path, what):
                return fn(*args, **kwargs)
        return inner  # type: ignore[return-value]

    return wrap
