"""The worker's side of a parent-driven timing window (``validate.window``): ask the parent for
the GPU (``await_gpu``), then answer its timing commands with a prepared ``timer.Timer``
(``serve_window``), so reference and candidate alternate in one exclusive window. Split out of
``validate.measure``.

Imports only torch (through ``measure`` and ``timer``) and the standard library.
"""
from __future__ import annotations

from collections.abc import Callable
from time import monotonic as _monotonic  # bound before any candidate code runs

from .cuda_wait import spinning
from .measure import summarize
from .timer import Timer


def await_gpu(receive: Callable[[], str], report: Callable[[dict], None]) -> bool:
    """Ask the parent for the GPU before the first GPU work (it holds the GPU's lock shared from
    then on, so no timing window of another grade is disturbed). False: the parent said stop."""
    report({"gpu": 1})
    answer = receive().strip()
    if answer not in ("go", "stop", ""):
        raise ValueError(f"expected go or stop, got {answer!r}")
    return answer == "go"


def step_aside_point(receive: Callable[[], str], report: Callable[[dict], None]) -> bool:
    """A point in a worker's GPU work where all of it so far has finished on the device (the
    caller synchronised): the parent may keep the worker here while another grade's window
    times (``step_aside.StepAside``), then says ``go`` (True). False: it said ``stop`` (the
    window was called off, or the worker left it): check, do not time, as ``await_gpu``."""
    report({"between": 1})
    answer = receive().strip()
    if answer not in ("go", "stop", ""):
        raise ValueError(f"expected go or stop at a point of stepping aside, got {answer!r}")
    return answer == "go"


def reads_slow(seen: list[float], unseen: list[float], after: list[float],
               ratio: float | None) -> bool:
    """Whether the unseen check's calls so far call for a spare trial: the fastest call on new
    inputs, or the slowest of those on the timed inputs after them, over ``ratio`` times the
    fastest on the timed inputs before (wall or event time, as the check's calls are timed;
    its bounds, by the device's clock, are the judge's). The judge asks it again of the calls
    a spare followed, and holds every call, spares too, to its bounds."""
    if not ratio or not seen or not unseen:
        return False
    usual = min(seen)
    return min(unseen) > ratio * usual or (bool(after) and max(after) > ratio * usual)


def serve_window(timer: Timer, receive: Callable[[], str],
                 report: Callable[[dict], None],
                 unseen: Callable[[Timer], int] | None = None,
                 after_work: Callable[[], None] | None = None) -> dict:
    """Answer a parent's timing commands until it says ``stop``; return the worker's record of
    the window. Commands (one line each): ``warm MS``, ``resize N``, ``settle MS``, ``round N``
    (or ``round N MS``),
    (``round N MS sleep``: the settling mostly asleep, ``Timer.settle``), ``loop N``,
    ``unseen``, ``stop``. Each answer is one report: ``{"warm": n, "resize": calls,
    "calls_per_sample", "estimate_ms"}`` (``resize``: the calls per sample a new estimate taken
    alone asks for, ``Timer.planned_calls``; 0: the graph's own), ``{"resized",
    "calls_per_sample", "estimate_ms"}`` (captured again with ``N`` calls, ``Timer.resize``),
    ``{"settle": n}`` (``MS`` of
    untimed samples before a turn's round), ``{"round": [ms, ...]}`` (``round N MS``: ``MS``
    of settling first, in the same turn),
    ``{"loop": n}``, ``{"unseen": n}`` (``unseen(timer)`` ran, timing ``n`` calls on inputs the
    timed function had not seen; 0 without it). ``after_work`` runs after every round and loop,
    before the answer (the grader's worker compares the timed inputs with those sent there)."""
    with spinning():  # no sleeping waiter's wake-up inside a timed span
        return _serve(timer, receive, report, unseen, after_work)


def _serve(timer: Timer, receive: Callable[[], str], report: Callable[[dict], None],
           unseen: Callable[[Timer], int] | None,
           after_work: Callable[[], None] | None) -> dict:
    samples: list[float] = []
    rounds = loops = settles = asleep_settles = 0
    while True:
        command = receive().split()
        if not command or command[0] == "stop":
            break
        verb, arg = command[0], float(command[1]) if len(command) > 1 else 0.0
        settle = float(command[2]) if len(command) > 2 else 0.0
        asleep = len(command) > 3 and command[3] == "sleep"
        if verb == "warm":  # alone on the GPU: the graph's size is estimated here
            done = timer.warm(arg)
            report({"warm": done, "resize": timer.planned_calls() or 0,
                    "calls_per_sample": timer.calls_per_sample,
                    "estimate_ms": timer.estimate_ms})
        elif verb == "resize":  # the others capture beside it; nothing is timed meanwhile
            resized = timer.resize(int(arg))
            if resized:
                timer.warm(20.0)
            report({"resized": resized, "calls_per_sample": timer.calls_per_sample,
                    "estimate_ms": timer.estimate_ms})
        elif verb == "settle":
            settles += 1
            report({"settle": timer.warm(arg)})
        elif verb == "round":
            stamps = [_monotonic()]  # where the turn's time went (``window.TURN_STAMPS``)
            if settle > 0:  # the turn's settling, in the same command: one round trip a turn
                settles += 1
                asleep_settles += asleep
                timer.settle(settle) if asleep else timer.warm(settle)
            stamps.append(_monotonic())
            times = timer.round(int(arg))
            stamps.append(_monotonic())
            samples.extend(times)
            timer.scored_ms = sorted(samples)[len(samples) // 2]
            rounds += 1
            if after_work is not None:
                after_work()
            stamps.append(_monotonic())
            report({"round": times, "at": stamps})
        elif verb == "loop":
            timer.loop(int(arg))
            loops += int(arg)
            if after_work is not None:
                after_work()
            report({"loop": int(arg)})
        elif verb == "unseen":
            report({"unseen": unseen(timer) if unseen is not None else 0})
        else:
            raise ValueError(f"unknown timing command {verb!r}")
    return summarize(timer.method, samples, rounds=rounds, loop_samples=loops, settles=settles,
                     settles_asleep=asleep_settles,
                     **{k: v for k, v in timer.describe().items() if k != "method"})
