"""A window's shared hold on the GPU stepping aside for another grade's timing window at its
members' safe points (``StepAside``).

While a window's members run their checks, the parent holds the GPU's lock shared for all of
them (``window.run_window``). A timing window asked for meanwhile waits until every shared hold
is let go; held for a whole stretch of checks (a grade's first calls, Triton compiles included:
4-6 s at KernelBench's sizes), that wait was most of a grade's time in its timing stage (a
median 4.4-9 s for windows of 1.1-1.3 s, H200). So a member reports at points where its GPU
work so far has finished (``window_worker.step_aside_point``); when another window waits, the
member is kept there until every member of the group is kept or waiting for the parent, then the
hold steps aside (``gpu_lock._Held.let_window_in``: let go, wait behind the waiting windows,
held shared again), and the kept members go on. No member runs GPU work while the hold is let
go: each is either kept at such a point or waits for a command, and the parent sends none
meanwhile (every ``Control.send`` takes the ``gate``).
"""
from __future__ import annotations

import functools
import threading
import time
from typing import Any

# How often a kept member's case is looked at again without a report to prompt it (a member
# that ended, a window that stopped waiting)
POLL_S = 0.05


class StepAside:
    """Steps ``group``'s shared hold aside (a ``window._Group``: ``controls``, ``active``)."""

    def __init__(self, group: Any):
        self._group = group
        self.gate = threading.RLock()
        self.held = None  # the group's shared hold while its members may be kept
        self._kept: set[str] = set()
        self.steps = 0  # times the hold stepped aside
        self.stepped_s = 0.0  # the time it spent let go
        self._done = threading.Event()
        self._poller: threading.Thread | None = None

    def attach(self) -> None:
        for name, control in self._group.controls.items():
            control.gate = self.gate
            control.intercept = functools.partial(self._report, name)
        self._poller = threading.Thread(target=self._poll, daemon=True, name="step-aside")
        self._poller.start()

    def close(self) -> None:
        """The window is over: a member that reaches a point later goes on at once."""
        self.release()
        self._done.set()
        if self._poller is not None:
            self._poller.join()

    def hold(self, held) -> None:
        """``held`` (shared) may step aside from now on."""
        with self.gate:
            self.held = held

    def release(self) -> None:
        """The hold is about to be let go by the window itself: kept members go on."""
        with self.gate:
            self.held = None
            self._go()

    def _report(self, name: str, value: dict) -> bool:
        between = "between" in value
        with self.gate:
            if between:
                self._kept.add(name)
            self._step_if_due()
        return between

    def _poll(self) -> None:
        while not self._done.wait(POLL_S):
            with self.gate:
                self._step_if_due()

    def _go(self) -> None:
        for name in sorted(self._kept):
            control = self._group.controls.get(name)
            if control is not None:
                control.send("go")
        self._kept.clear()

    def _step_if_due(self) -> None:
        if not self._kept:
            return
        held = self.held
        if held is None or not held.window_waiting():
            self._go()
            return
        members = list(self._group.controls.values())  # those that left too: they may still
        if any(not (control.idle or control.ended) for control in members):  # finish checks
            return  # a member still at work: the kept ones wait for it
        began = time.monotonic()
        if held.let_window_in():
            self.steps += 1
        waited = time.monotonic() - began
        self.stepped_s += waited
        for control in members:  # another grade's window: not their time
            control.extend(waited)
        self._go()
