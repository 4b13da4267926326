"""How many GPU workers one grading process ran on a device at once over a stretch of time
(``Beside``).

The judge's device-work check compares a candidate's calls on seen inputs with its calls on
new ones; both ran beside other grades' workers, time-sliced on one GPU, and a call made beside
many reads many times its kernels' time alone. The grader counts the workers it runs on each
device (a grade's fresh reference runs while they run, its candidates while theirs run) and
asks, once a candidate's run is over, for the most that ran at once while its fresh calls ran,
its own included: how far the window's reading of a call made alone may lower the bound
(``checks.device_work.scored_device_work``). Work of other processes on the GPU is not counted: the
count is a floor, and a floor only keeps the bound tighter.
"""
from __future__ import annotations

import bisect
import threading
import time
from collections import deque
from contextlib import contextmanager

KEPT_CHANGES = 1 << 14  # per device: the counts' latest changes kept for ``most``


class Beside:
    """GPU workers in flight per device key (the device a grade's workers see: its
    ``CUDA_VISIBLE_DEVICES``), and when the count changed."""

    def __init__(self, clock=time.monotonic):
        self._clock = clock
        self._lock = threading.Lock()
        self._count: dict[str, int] = {}
        self._changes: dict[str, deque] = {}  # (when, the count from then on), in time order

    def _change(self, key: str, by: int) -> None:
        with self._lock:
            count = self._count[key] = self._count.get(key, 0) + by
            self._changes.setdefault(key, deque(maxlen=KEPT_CHANGES)).append(
                (self._clock(), count))

    @contextmanager
    def held(self, key: str, workers: int):
        """Count ``workers`` on ``key`` while the block runs."""
        workers = max(0, int(workers))
        self._change(key, workers)
        try:
            yield
        finally:
            self._change(key, -workers)

    def most(self, key: str, since: float, until: float) -> int | None:
        """The most workers on ``key`` at once from ``since`` to ``until`` (the clock's
        seconds); None where the changes kept do not reach back to ``since``."""
        with self._lock:
            changes = list(self._changes.get(key, ()))
        if not changes or until < since:
            return None
        times = [when for when, _ in changes]
        first = bisect.bisect_right(times, since) - 1  # the count in force at ``since``
        if first < 0:
            return None
        last = bisect.bisect_right(times, until)
        return max(count for _, count in changes[first:last])
