"""One run per target: an advisory ``fcntl.flock`` lock file that names the process holding it.

A build holds ``BUILD/.kernelmill.lock`` and a batch grade holds ``OUT.lock`` for as long as it
runs. A second run on the same target does not wait: it fails at once with one line naming the
holder's pid, so two runs never validate the same problems twice or write every verdict twice.
The kernel drops the lock when its holder exits, however it exits (kill -9 included), so a stale
lock file never blocks anyone; the file is removed on a clean release.

    with hold_lock(Path(out) / ".kernelmill.lock", what=f"build folder {out}"):
        ...
"""
from __future__ import annotations

import fcntl
import functools
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

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


def _holder(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _acquire(path: Path, what: str) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _holder(fd)
            os.close(fd)
            raise LockedError(what, path, pid) from None
        except BaseException:
            os.close(fd)
            raise
        # The previous holder may have removed the file between our open and our flock: then
        # we locked an orphan inode that nobody else will see. Start again on the new file.
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def _release(path: Path, fd: int) -> None:
    try:
        path.unlink()  # while still holding it, so nobody can lock the file we remove
    except FileNotFoundError:
        pass
    os.close(fd)


@contextmanager
def hold_lock(path: str | os.PathLike, what: str | None = None) -> Iterator[Path]:
    """Hold the lock file ``path`` for the ``with`` block, or raise ``LockedError`` at once.

    ``what`` names the target in the error (default: the lock file's folder or stem). The lock is
    per open file, so the same process taking it twice fails too, as a second run would.
    """
    path = Path(path)
    fd = _acquire(path, what or str(path))
    try:
        yield path
    finally:
        _release(path, fd)


def lock_path_for(out: str | os.PathLike) -> Path:
    """The lock file of a single output file: ``OUT.lock`` beside it."""
    out = Path(out)
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
