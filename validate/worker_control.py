"""A parent's line to a running worker (``Control``): commands sent down a pipe, reports
waited for, the worker's process group paused and resumed, its time limit extended, and its
late data released part by part. Split out of ``validate.harness``, which re-exports it.
"""
from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from typing import TYPE_CHECKING

from .worker_processes import _proc_with_token
from .zygote_worker import descendants, pgid_of

if TYPE_CHECKING:
    from .payload_files import _LateFile


class Control:
    """A parent's line to a running worker: ``send`` writes a command line the worker reads with
    ``harness_worker.receive``; ``next_report`` waits for what it sends with
    ``harness_worker.report``, stamped with the parent's monotonic clock. Pass one to
    ``run_in_worker(control=...)`` (which blocks: run it in a thread)."""

    def __init__(self):
        self._fd: int | None = None
        self._cond = threading.Condition()
        self.reports: list[tuple[float, dict]] = []
        self._next = 0
        self.ended = False
        self.started_at: float | None = None  # when its run started (``time.monotonic``)
        # time the parent kept the worker waiting (``extend``): the union of the spans credited,
        # whoever credited them, and time granted outright (``grant``)
        self._spans: list[list[float]] = []  # disjoint (from, to), by ``time.monotonic``
        self._granted_s = 0.0
        self._late: _LateFile | None = None  # the run's late data (``release_late``)
        self.late_released: list[int] = []  # the parts handed on, in the order asked
        self.late_write_ms: list[float] = []  # how long each took to hand on (the parent's clock)
        self.pid: int | None = None  # the worker's, which leads its own process group
        self.device_mib: int | None = None  # its device memory as NVML last read it (MiB)
        self.token = ""  # the run's, in the environment of every process it started
        self.strays: list[int] = []  # its processes outside that group (``find_strays``)
        self.paused = False
        self._paused_at: float | None = None  # while stopped: since when (credited at resume)
        # The worker waits for the parent: it reported and has not been sent a command since
        # (in the window's protocol a worker reports with its GPU work done, then waits)
        self.idle = False
        # ``intercept(report)`` sees every report first, in the reader's thread; True: taken
        # (not queued). ``gate``: a lock every ``send`` takes, and ``on_send(line)`` sees
        # every command first (``step_aside.StepAside``)
        self.intercept = None
        self.gate = None
        self.on_send = None

    def find_strays(self) -> list[int]:
        """The worker's processes that left its process group (a child that called ``setsid``:
        ``killpg`` does not reach it), by the run's token and by descent; from here on
        ``pause`` and ``resume`` signal each of them too. Looked for once, as a window begins to
        time: no process of a candidate may start after its first call."""
        if self.pid is None or self.ended:
            return []
        found = set(_proc_with_token(self.token)) if self.token else set()
        found.update(descendants(self.pid))
        with self._cond:
            self.strays = sorted(p for p in found if pgid_of(p) not in (None, self.pid))
        return self.strays

    def pause(self) -> None:
        """Stop every process of the worker's group (SIGSTOP): outside its turn in a timing
        window nothing of it runs, not a thread it left spinning to slow another member's turn
        (T-15) nor a runtime's idle spin. A worker waiting for its next command
        loses nothing; ``resume`` (SIGCONT) goes on where it stood."""
        if not self.paused:
            self._signal(signal.SIGSTOP, True)

    def resume(self) -> None:
        if self.paused:
            self._signal(signal.SIGCONT, False)

    def _signal(self, sig: int, paused: bool) -> None:
        with self._cond:
            if self.pid is None or (self.ended and not self.paused):
                return
            try:
                os.killpg(self.pid, sig)
            except (ProcessLookupError, PermissionError):
                return
            for pid in self.strays:
                try:
                    os.kill(pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
            self.paused = paused
            # time stopped is never the worker's own, whoever stopped it and whether or not
            # the code that did credits it too (``extend`` counts a second once)
            now = time.monotonic()
            if paused:
                self._paused_at = now
            elif self._paused_at is not None:
                self._add_span(self._paused_at, now)
                self._paused_at = None

    def extend(self, seconds: float, ended: float | None = None) -> None:
        """Add the span of ``seconds`` up to ``ended`` (``time.monotonic``; now if None) to the
        worker's time limit: time it spent waiting for the GPU on the parent's account (a lock
        held by other grades, another window's step, a mate's turn) is not the submission's.
        Several of the parent's threads may credit one wait (a window's step while the parent
        waits for a mate): the limit moves on by the union of the spans, each second once."""
        seconds = max(0.0, float(seconds))
        with self._cond:
            if ended is None:
                ended = time.monotonic()
            self._add_span(ended - seconds, ended)

    def _add_span(self, began: float, ended: float) -> None:
        self._spans = _merged(self._spans, began, ended)

    def grant(self, seconds: float) -> None:
        """Add ``seconds`` to the worker's time limit outright (a phase of its own granted its
        time once it begins), apart from the waits ``extend`` credits."""
        with self._cond:
            self._granted_s += max(0.0, float(seconds))

    @property
    def waited_s(self) -> float:
        """The seconds credited (a stop under way counts as far as it has gone)."""
        with self._cond:
            spans = self._spans if self._paused_at is None else \
                _merged(self._spans, self._paused_at, time.monotonic())
            return sum(b - a for a, b in spans) + self._granted_s

    def _attach(self, fd: int) -> None:
        self._fd = fd

    def release_late(self, index: int) -> None:
        """Hand part ``index`` of the run's late data (``run_in_worker(late=...)``) to the
        worker: it asked for it (``late_read.late_payload``)."""
        with self._cond:
            late = self._late
            self.late_released.append(index)
        if late is not None:
            began = time.monotonic()
            late.release(index)
            self.late_write_ms.append(round((time.monotonic() - began) * 1e3, 2))

    def _deliver(self, value: dict) -> None:
        with self._cond:
            self.idle = True
        if self.intercept is not None and self.intercept(value):
            return
        with self._cond:
            self.reports.append((time.monotonic(), value))
            self._cond.notify_all()

    def _end(self) -> None:
        self.resume()  # a process group left stopped would outlive its run
        with self._cond:
            self.ended = True
            if self._paused_at is not None:  # (a group gone while stopped)
                self._add_span(self._paused_at, time.monotonic())
                self._paused_at = None
            if self._fd is not None:
                try:
                    os.close(self._fd)
                except OSError:
                    pass
                self._fd = None
            self._cond.notify_all()

    def send(self, line: str) -> bool:
        """Write one command line; False when the worker is gone."""
        with self._cond:
            fd = self._fd
        if fd is None:
            return False
        data = (line.rstrip("\n") + "\n").encode()
        with self.gate or contextlib.nullcontext():
            self.idle = False
            if self.on_send is not None:
                self.on_send(line)
            try:
                while data:
                    data = data[os.write(fd, data):]
            except OSError:
                return False
        return True

    def pending(self) -> bool:
        """A report is waiting to be taken: the worker said something and waits for an answer."""
        with self._cond:
            return self._next < len(self.reports)

    def wait_report(self, timeout: float) -> bool:
        """Wait up to ``timeout`` for a report not yet taken (True) or the worker's end."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._next >= len(self.reports) and not self.ended:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
            return self._next < len(self.reports)

    def next_report(self, timeout: float | None = None) -> tuple[float, dict] | None:
        """The next report not yet taken, or None when the worker ended or ``timeout`` passed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._next >= len(self.reports):
                if self.ended:
                    return None
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return None
                self._cond.wait(remaining)
            self._next += 1
            return self.reports[self._next - 1]


# Spans closer than this are one: credits made back to back (a wait credited a tick at a
# time, each tick's span ending where the parent's clock was read) keep the list short
MERGE_GAP_S = 1e-3


def _merged(spans: list[list[float]], began: float, ended: float) -> list[list[float]]:
    """``spans`` (disjoint, sorted) with ``[began, ended]`` merged into every span it touches
    or comes within ``MERGE_GAP_S`` of."""
    kept = []
    for span in spans:
        if span[1] + MERGE_GAP_S < began or span[0] > ended + MERGE_GAP_S:
            kept.append(span)
        else:
            began, ended = min(began, span[0]), max(ended, span[1])
    kept.append([began, ended])
    kept.sort()
    return kept
