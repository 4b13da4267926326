"""The GPU lock shared by the validator and the grader (``GpuLock``): a readers-writer lock on
one GPU across processes, held shared by GPU work that is not being timed and exclusively by a
timing window; it also records when the last timing window ended. Split out of
``validate.measure``, which re-exports it.

Imports only the standard library.
"""
from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from typing import Any


class GpuLock:
    """Readers-writer lock on one GPU across processes, with writer priority (``flock``ed
    files ``PATH.turn``, ``PATH.main`` and ``PATH.windows``): GPU work that is not being timed
    holds it shared, a timing window holds it exclusively, so nothing else runs on the GPU
    while it is timed. ``None`` as the path: no locking. Files are opened read-only when they
    exist, so a confined worker that may not write there can still take the lock.

    Windows go before new shared work as a queue, not one at a time: each window holds
    ``windows`` shared from its ask until its window ends, and shared work starts only while
    no window holds it. With ``turn`` alone, when a window ended, new shared work and the next
    waiting window raced for it; shared work that won (a grade's checks, seconds of Triton
    compiles) made that window wait for all of it while the GPU idled, and single grades of
    KernelBench-sized answers ran one window per 8-10 s (H200)."""

    def __init__(self, path: str | None):
        self.path = path

    @staticmethod
    def _open(path: str):
        try:
            return open(path, "rb")
        except FileNotFoundError:
            return open(path, "a+b")

    @contextlib.contextmanager
    def _locked(self, exclusive: bool):
        if not self.path:
            yield _Held(None, None)
            return
        import fcntl

        with self._open(self.path + ".turn") as turn, self._open(self.path + ".main") as main, \
                contextlib.ExitStack() as stack:
            try:
                windows = stack.enter_context(self._open(self.path + ".windows"))
            except OSError:  # made by a grader without the queue, unwritable here: no queue
                windows = None
            if windows is not None and exclusive:
                fcntl.flock(windows, fcntl.LOCK_SH)  # in the queue of windows from now
            elif windows is not None:
                _behind_windows(windows)
            asked = time.monotonic()
            fcntl.flock(turn, fcntl.LOCK_EX)
            turned = time.monotonic()
            try:
                fcntl.flock(main, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            finally:
                if not exclusive:
                    fcntl.flock(turn, fcntl.LOCK_UN)
            held = _Held(turn if exclusive else None, main, queue=turn,
                         windows=windows if exclusive else None, waits_for=windows)
            # a window's wait in two parts: behind the windows before it (``queued_s``), then
            # for the shared holders to step aside or end (``drained_s``)
            held.queued_s, held.drained_s = turned - asked, time.monotonic() - turned
            try:
                yield held
            finally:
                fcntl.flock(main, fcntl.LOCK_UN)
                if held.turn is not None:
                    fcntl.flock(turn, fcntl.LOCK_UN)
                held.leave_queue()

    def shared(self):
        return self._locked(False)

    def since_window_s(self) -> float | None:
        """Seconds since the last timing window on this GPU ended (any grader or validator of
        this user), None when unknown (no lock, no window yet, or a time that is not one the
        parent wrote: in the future, unreadable). The time is the file's contents, which only
        the parent can write: a confined worker may not open it for writing, but could set its
        modification time."""
        if not self.path:
            return None
        try:
            with open(self.path + ".hot", "rb") as held:
                ended = float(held.read(64).decode("ascii"))
        except (OSError, ValueError, UnicodeDecodeError):
            return None
        since = time.time() - ended
        return since if math.isfinite(since) and since >= 0 else None

    def window_ended(self) -> None:
        """Record that a timing window on this GPU ended now (``since_window_s``)."""
        if not self.path:
            return
        try:
            with open(self.path + ".hot", "w", encoding="ascii") as held:
                held.write(repr(time.time()))
        except OSError:
            pass

    def exclusive(self):
        """Held exclusively; the handle's ``downgrade()`` turns it shared with no gap."""
        return self._locked(True)

    @contextlib.contextmanager
    def outside_windows(self):
        """Held shared while no timing window holds the GPU alone, without a place in the queue:
        it waits for a window that holds the GPU, never for one still waiting for it (a window
        that waits may be waiting for this holder's own grade, whose members this holder is one
        of: a worker making its CUDA context, ``harness_worker._init_cuda``). A window asked for
        meanwhile waits for it as for any shared holder."""
        if not self.path:
            yield
            return
        import fcntl

        with self._open(self.path + ".main") as main:
            fcntl.flock(main, fcntl.LOCK_SH)  # flock grants it beside shared holders at once
            try:
                yield
            finally:
                fcntl.flock(main, fcntl.LOCK_UN)


class _Held:
    """A held ``GpuLock``. ``downgrade()`` turns an exclusive hold into a shared one with no
    moment in between where another window could take the GPU: the ``turn`` file stays held
    while ``main`` is converted (flock's conversion drops the old lock before taking the new),
    so the work a window's workers do once told to stop (checks after the window) runs under
    the lock, not in the next window (on an H100 it ran inside other groups' windows and
    read honest 1 µs kernels 1.5x slow)."""

    def __init__(self, turn, main, queue=None, windows=None, waits_for=None):
        self.turn, self.main = turn, main
        self.queued_s = self.drained_s = 0.0
        self._queue = queue  # the ``turn`` file, held or not
        self._windows = windows  # the queue of windows, while this window is in it
        self._waits_for = waits_for  # that file, held or not

    def window_waiting(self) -> bool:
        """A shared hold, and a timing window (or a holder passing through) has the turn: it
        waits for the shared holders to drain."""
        if self.turn is not None or self.main is None or self._queue is None:
            return False
        import fcntl

        try:
            fcntl.flock(self._queue, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(self._queue, fcntl.LOCK_UN)
        return False

    def leave_queue(self) -> None:
        if self._windows is not None:
            import fcntl

            fcntl.flock(self._windows, fcntl.LOCK_UN)
            self._windows = None

    def let_window_in(self, on_wait: Callable[[], Any] | None = None) -> bool:
        """A shared hold steps aside for a timing window waiting for the GPU (it holds
        ``turn`` while it waits for the shared holders to drain), then holds shared again
        behind it; True when it stepped aside (``on_wait()`` first). Called between pieces of
        a long stretch of GPU work, with the work so far finished on the device, so a window
        waits for one piece, not the whole stretch; every other holder's next piece waits
        behind that window meanwhile."""
        if not self.window_waiting():
            return False
        import fcntl

        if on_wait is not None:
            on_wait()
        fcntl.flock(self.main, fcntl.LOCK_UN)
        if self._waits_for is not None:
            _behind_windows(self._waits_for)
        fcntl.flock(self._queue, fcntl.LOCK_EX)
        try:
            fcntl.flock(self.main, fcntl.LOCK_SH)
        finally:
            fcntl.flock(self._queue, fcntl.LOCK_UN)
        return True

    def downgrade(self) -> None:
        if self.turn is None:
            return
        import fcntl

        fcntl.flock(self.main, fcntl.LOCK_SH)
        fcntl.flock(self.turn, fcntl.LOCK_UN)
        self.turn = None
        self.leave_queue()  # the window is over: the next one goes before new shared work


def _behind_windows(windows) -> None:
    """Wait until no timing window is asked for or running on this GPU (none holds
    ``windows``); shared work starts then."""
    import fcntl

    fcntl.flock(windows, fcntl.LOCK_EX)
    fcntl.flock(windows, fcntl.LOCK_UN)
