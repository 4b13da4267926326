"""How many GPU workers one grading process ran on a device while a grade ran (``Beside``).

The judge's device-work check compares a candidate's calls on seen inputs with its calls on
new ones; both ran beside other grades' workers, time-sliced on one GPU, and a call made beside
many reads many times its kernels' time alone. The grader counts the workers it has on each
device (a grade holds its candidates' and its reference's count while it runs) and gives each
grade the most that ran at once during it, its own included: how far the window's readings made
alone may lower the bound (``checks.probes.scored_device_work``). Work of other processes on
the GPU is not counted: the count is a floor, and a floor only keeps the bound tighter.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager


class Beside:
    """GPU workers in flight per device key (a grade's ``CUDA_VISIBLE_DEVICES``, or the
    grader's device)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._count: dict[str, int] = {}
        self._open: dict[str, list[list[int]]] = {}  # each running grade's [peak]

    @contextmanager
    def held(self, key: str, workers: int):
        """Count ``workers`` on ``key`` while the block runs; yields a one-item list whose
        value is the most workers on ``key`` at any moment of the block, its own included."""
        peak = [0]
        with self._lock:
            count = self._count[key] = self._count.get(key, 0) + max(1, workers)
            mine = self._open.setdefault(key, [])
            mine.append(peak)
            for other in mine:  # every grade running now sees this many at once
                other[0] = max(other[0], count)
        try:
            yield peak
        finally:
            with self._lock:
                self._count[key] -= max(1, workers)
                self._open[key] = [p for p in self._open[key] if p is not peak]
