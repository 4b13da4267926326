"""A window's shared hold on the GPU stepping aside for another grade's timing window at its
members' safe points (``StepAside``).

While a window's members run their checks, the parent holds the GPU's lock shared for all of
them (``window.run_window``). A timing window asked for meanwhile waits until every shared hold
is let go; held for a whole stretch of checks (a grade's first calls, Triton compiles included:
4-6 s at KernelBench's sizes), that wait was most of a grade's time in its timing stage (a
median 4.4-9 s for windows of 1.1-1.3 s, H200). So a member reports at points where its GPU
work so far has finished (``window_worker.step_aside_point``); when another window waits, the
member is kept there until every member of the group is kept or waiting for the parent (a member
that left the window: until it ended), then every member's processes are stopped, the hold
steps aside (``gpu_lock._Held.let_window_in``: let go, wait behind the waiting windows, held
shared again), and they go on. A kept member waits for busy mates at most ``PATIENCE_S``, then
goes on without the step (the waiting window waits for the group as it would have). While no
hold is attached (the window's own exclusive part, the moment between it and the shared hold
after it) a member that reaches a point is kept until one is. The parent sends no command
while the hold is let go (every ``Control.send`` takes the ``gate``).

A member that reports ``aside`` has finished its GPU work and runs host work (a Triton compile
in its first calls) until its next point: it counts as kept for a step, is stopped with the
others while the hold is let go, and is sent nothing until that point.

A kept member's time limit moves on with its wait as the wait lasts, and the window's own
deadlines move on by the time any member was kept (``delay_s``): a slow mate, or another
grade's window, costs a member time it gets back. Every member stopped for a step gets the
step's time back, one waiting for the parent too: the parent's own thread may be held at the
gate meanwhile (its ``send``), crediting no one (``Control.extend`` counts a second credited
twice once).
"""
from __future__ import annotations

import functools
import threading
import time
from typing import Any

POLL_S = 0.05  # how often kept members are credited and their case looked at again
PATIENCE_S = 1.0  # the longest a kept member waits for busy mates before it goes on


class StepAside:
    """Steps ``group``'s shared hold aside (a ``window_group._Group``: ``controls``, ``active``,
    ``dropped``)."""

    def __init__(self, group: Any):
        self._group = group
        self.gate = threading.RLock()
        self.held = None  # the group's shared hold while its members may step aside
        self._closed = False
        self._book = threading.Lock()  # the kept members and their credit
        self._kept: dict[str, float] = {}  # name -> when its wait was last credited
        self._kept_since: dict[str, float] = {}
        self._aside: dict[str, float] = {}  # members in host work until their next point: since
        # each member's asides: [how many, seconds in all] (its compiles' host work)
        self.asides: dict[str, list] = {}
        self._ticked = time.monotonic()
        self.steps = 0  # times the hold stepped aside
        self.stepped_s = 0.0  # the time it spent let go
        self.spans: list[tuple[float, float]] = []  # each time, from and to (time.monotonic)
        self.delay_s = 0.0  # the time any member was kept
        # each member's longest stretch of GPU work between a command (a ``go`` included) and
        # its next point, (from, to) by ``time.monotonic``: what a waiting window waited for
        # at most, where that member was the last to step aside
        self.stretches: dict[str, tuple[float, float]] = {}
        self._went: dict[str, float] = {}  # when each member was last sent a command
        self._done = threading.Event()
        self._poller: threading.Thread | None = None

    def attach(self) -> None:
        now = time.monotonic()
        for name, control in self._group.controls.items():
            self._went[name] = now
            control.gate = self.gate
            control.intercept = functools.partial(self._report, name)
            control.on_send = functools.partial(self._sent, name)
        self._poller = threading.Thread(target=self._poll, daemon=True, name="step-aside")
        self._poller.start()

    def close(self) -> None:
        """The window is over: kept members go on, and a member that reaches a point later
        goes on at once."""
        with self.gate:
            self.held = None
            self._closed = True
            self._go()
        self._done.set()
        if self._poller is not None:
            self._poller.join()

    def hold(self, held) -> None:
        """``held`` (shared) may step aside from now on."""
        with self.gate:
            self.held = held
            self._step_if_due()

    def release(self) -> None:
        """The window lets its hold go itself: a member reaching a point is kept until the
        next hold."""
        with self.gate:
            self.held = None

    def _report(self, name: str, value: dict) -> bool:
        between, aside = "between" in value, "aside" in value
        with self.gate:
            if between or aside:
                with self._book:
                    now = time.monotonic()
                    # the stretch of GPU work since the last command ends here; an aside's
                    # host work that follows is none (its point starts no stretch)
                    began = self._went.pop(name, None)
                    longest = self.stretches.get(name)
                    if began is not None and (longest is None or
                                              now - began > longest[1] - longest[0]):
                        self.stretches[name] = (began, now)
                    if aside:
                        self._aside[name] = now
                    else:
                        self._kept[name] = self._kept_since[name] = now
                        since = self._aside.pop(name, None)
                        if since is not None:
                            count = self.asides.setdefault(name, [0, 0.0])
                            count[0] += 1
                            count[1] += now - since
            self._step_if_due()
        return between or aside

    def _sent(self, name: str, line: str) -> None:
        """A command to ``name`` (under the gate): one to a kept member answers its point
        (``stop`` from the window: it checks and is not timed), so it is kept no longer."""
        self._credit()
        with self._book:
            self._kept.pop(name, None)
            self._kept_since.pop(name, None)
            self._went[name] = time.monotonic()

    def _poll(self) -> None:
        while not self._done.wait(POLL_S):
            self._credit()
            if self.gate.acquire(blocking=False):  # a step under way holds it
                try:
                    self._step_if_due()
                finally:
                    self.gate.release()

    def _credit(self) -> None:
        """Kept members' time limits, and the window's deadlines, move on by their wait."""
        with self._book:
            now = time.monotonic()
            if self._kept:
                self.delay_s += now - self._ticked
            self._ticked = now
            for name, last in self._kept.items():
                control = self._group.controls.get(name)
                if control is not None:
                    control.extend(now - last, now)  # (no gap between one tick and the next)
                self._kept[name] = now

    def _go(self) -> None:
        self._credit()
        for name in sorted(self._kept):
            control = self._group.controls.get(name)
            if control is not None and not control.ended:
                control.send("go")  # (``_sent``: kept no longer)
        with self._book:
            self._kept.clear()
            self._kept_since.clear()

    def _busy(self) -> bool:
        """A member may be running GPU work: it was sent a command and has not reported since,
        or it left the window and has not ended (told to stop, it checks on its own)."""
        dropped = self._group.dropped
        return any(not control.ended and (name in dropped or not control.idle)
                   for name, control in self._group.controls.items())

    def _step_if_due(self) -> None:
        if self._aside:  # a member that ended (or left) in its host work is aside no longer
            dropped = self._group.dropped
            self._aside = {name: since for name, since in self._aside.items()
                           if name not in dropped and
                           not getattr(self._group.controls.get(name), "ended", True)}
        if not self._kept and not self._aside:
            return
        held = self.held
        if held is None:
            if self._closed:
                self._go()
            return  # kept until a hold is attached
        if not held.window_waiting():
            self._go()
            return
        if self._busy():
            with self._book:
                since = self._kept_since.values()
                waited = time.monotonic() - min(since) if since else 0.0
            if waited > PATIENCE_S:
                self._go()  # a mate that long at work: the waiting window waits for us
            return
        members = [c for c in self._group.controls.values() if not c.ended]
        began = time.monotonic()
        for control in members:  # nothing of theirs runs while the hold is let go
            control.pause()
        try:
            if held.let_window_in():
                self.steps += 1
        finally:
            for control in members:
                control.resume()
        ended = time.monotonic()
        self.stepped_s += ended - began
        self.spans.append((began, ended))
        for control in members:  # every member stopped for the step: not their time, whether
            control.extend(ended - began, ended)  # kept, aside or waiting for the parent
        if self._aside and not self._kept:  # nor the window's (kept members credit it)
            self.delay_s += ended - began
        self._go()
