"""A timing window's members as the parent drives them (``_Group``): who is still in it, who
runs while one is timed (the others' process groups stopped), their answers (``_answer``, which
also hands out an unseen input's late data), their time limits moving on while they wait for
others (``_crediting``, ``_wait_crediting``), and the early answers that admit a member to be
timed (``_admit``). Split out of ``validate.window``, which drives the window itself.
"""
from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

from .harness import Control
from .payload_files import LateRefused


class WindowError(RuntimeError):
    """A participant failed or went silent during the window."""

    def __init__(self, name: str, message: str):
        super().__init__(f"{name}: {message}")
        self.participant = name


def _answer(name: str, control: Control, key: str, timeout: float,
            whole: bool = False) -> tuple[float, object]:
    """The participant's answer with ``key``; a part of its late data that it asks for on the
    way (an unseen input, just before its call) is written and said to be there."""
    while True:
        got = control.next_report(timeout)
        if got is None:
            raise WindowError(name, "ended or went silent during timing" if control.ended
                              else f"no answer within {timeout:g}s")
        at, value = got
        if key != "late" and type(value.get("late")) is int:
            try:
                control.release_late(value["late"])
            except LateRefused as exc:
                raise WindowError(name, str(exc)) from exc
            control.send(f"late {value['late']}")
            continue
        if key not in value:
            raise WindowError(name, f"answered {sorted(value)[:3]}, expected {key!r}")
        return at, (value if whole else value[key])


def _admit(group: _Group, admit: Callable[[str, Any], str | None],
           due: Callable[[], float]) -> None:
    """Take each droppable participant's ``checked`` report as it comes (in any order: one
    slow member does not hold the others' answers back) and answer it: ``time``, or out of the
    window with ``admit``'s reason; by the deadline ``due()``."""
    waiting = [name for name in group.droppable if name in group.active]
    while waiting and time.monotonic() < due():
        answered = False
        for name in list(waiting):
            control = group.active.get(name)
            if control is None:
                waiting.remove(name)
                continue
            if not (control.pending() or control.ended):
                continue
            waiting.remove(name)
            answered = True
            got = group.ask(name, None, "checked", max(0.1, due() - time.monotonic()))
            if got is None:
                continue  # it failed: out of the window already
            reason = admit(name, got[1])
            if reason:
                group.fail(name, WindowError(name, reason))
            else:
                control.send("time")
        if waiting and not answered:
            first, began = group.active.get(waiting[0]), time.monotonic()
            if first is not None:
                first.wait_report(0.02)
            for other, control in group.active.items():  # ready and waiting: not their time
                if other not in waiting and control.pending():
                    control.extend(time.monotonic() - began)
    for name in waiting:  # still silent at the deadline
        if name in group.active:
            group.fail(name, WindowError(name, "no answers before the deadline"))


def _wait_crediting(group: _Group, name: str, ready: dict, due: Callable[[], float]) -> None:
    """Wait for ``name``'s next report (or its end, or the deadline ``due()``), crediting the
    time to every other participant that is waiting too: those in ``ready`` (already answered)
    and those whose report is in and not yet taken (they answered before their turn came). Waiting
    for a slower member (a long import, a hang until its own limit) is not their own time: on
    an H100 a member first in the order hung at import for 60 s and the three behind it, ready
    and waiting, were killed with it."""
    control = group.active.get(name)
    while control is not None and time.monotonic() < due():
        began = time.monotonic()
        if control.wait_report(min(0.5, max(0.0, due() - began))) or control.ended:
            return
        for other, waiting in list(group.active.items()):
            if other != name and (other in ready or waiting.pending()):
                waiting.extend(time.monotonic() - began)


class _Group:
    """The participants still in a window; a ``droppable`` one that fails leaves it alone."""

    def __init__(self, participants: dict[str, Control], droppable: tuple[str, ...],
                 result: dict):
        self.active = dict(participants)
        self.controls = dict(participants)
        self.droppable = droppable
        self.dropped = result["dropped"]
        self.alone = False  # while timing: only the member asked runs, the others stopped

    def fail(self, name: str, exc: WindowError) -> None:
        if name not in self.droppable:
            raise exc
        self.dropped[name] = str(exc).split(": ", 1)[-1]
        control = self.active.pop(name)
        control.resume()  # it ends on its own time, outside the window
        control.send("stop")

    def only(self, name: str) -> None:
        """While the window times (``alone``), ``name`` runs and every other member's process
        group is stopped: a member cannot work in another's turn (a spinning thread, a
        runtime's idle spin) to slow it."""
        if not self.alone:
            return
        for other, control in self.active.items():
            if other != name:
                control.pause()
        if name in self.active:
            self.active[name].resume()

    def rest(self, name: str) -> None:
        """``name``'s turn is over: stopped at once (while timing), not when the next turn
        comes, so nothing of it runs while the parent takes its answer (a spinning thread
        there starved the parent, and through it every turn, on a loaded host)."""
        if self.alone and name in self.active:
            self.active[name].pause()

    def everyone(self) -> None:
        """Every member runs again (the window's timed part is over, or all work at once)."""
        for control in self.controls.values():
            control.resume()

    def ask(self, name: str, command: str | None, key: str, timeout: float,
            whole: bool = False, send_only: bool = False):
        """Send ``command`` (if any), wait for ``key``: ``(at, value)`` (with ``whole``, the
        whole report as value), None once dropped. With ``send_only``: True once sent (the
        answer is taken by a later ``ask``)."""
        if name not in self.active:
            return None
        control = self.active[name]
        try:
            if command is not None:
                self.only(name)
                control.send(command)
            if send_only:
                return True
            got = _answer(name, control, key, timeout, whole)
            if command is not None:
                self.rest(name)
            return got
        except WindowError as exc:
            self.fail(name, exc)
            return None

    def await_dropped(self, due: Callable[[], float]) -> None:
        """Wait (until the deadline ``due()``) for the participants that left the window to
        end, their wait credited to the ones still in it."""
        for name in list(self.dropped):
            control = self.controls[name]
            while not control.ended and time.monotonic() < due():
                began = time.monotonic()
                control.wait_report(0.25)
                for other in self.active.values():
                    other.extend(time.monotonic() - began)

    def credit_others(self, name: str, since: float) -> None:
        """The time since ``since``, spent on ``name``'s turn alone (its warm-up, its clock
        or unseen check), is not the other members' own: their time limits move on."""
        for other, control in self.active.items():
            if other != name:
                control.extend(time.monotonic() - since)

    @contextlib.contextmanager
    def turn(self, name: str):
        """``name``'s turn alone: its duration is credited to the others (``credit_others``)."""
        began = time.monotonic()
        self.only(name)
        try:
            yield
        finally:
            self.rest(name)
            self.credit_others(name, began)

    def gone(self) -> bool:
        """Every droppable participant dropped out: nothing is left to time."""
        return bool(self.droppable) and not any(n in self.active for n in self.droppable)


@contextlib.contextmanager
def _crediting(group: _Group, tick_s: float = 0.25):
    """While the window waits, its members' time limits move on with it, a tick at a time:
    credited only once the wait ended, a long wait (another group's window) killed them first
    (on an H100, 8-member groups timed out after 55 s waiting for the exclusive lock)."""
    done = threading.Event()

    def tick() -> None:
        last = time.monotonic()
        while True:
            stop = done.wait(tick_s)
            now = time.monotonic()
            for control in list(group.active.values()):
                control.extend(now - last)
            last = now
            if stop:
                return

    ticker = threading.Thread(target=tick, daemon=True, name="window-credit")
    ticker.start()
    try:
        yield
    finally:
        done.set()
        ticker.join()
