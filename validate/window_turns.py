"""A timing window's turns, the pieces ``window.run_window`` runs them with: the order of a
round, where a turn's wall time went, the clock check's loop, the witness rounds around the
unseen checks, the members' graphs sized again together, and the participants' CIs (their
samples', and counted in turns).
"""
from __future__ import annotations

import math
import random
import time
from typing import TYPE_CHECKING

from .harness import Control
from .measure import median_ci_pct, turn_ci_pct
from .window_group import WindowError, _answer, _Group

if TYPE_CHECKING:
    from .window import WindowSettings


def _clock_check(name: str, control: Control, info: dict, samples: list[float],
                 paces: list[float], settings: WindowSettings, timeout: float) -> float:
    """Per call, the parent's own clock over a back-to-back loop of ``loop_ms`` of the work the
    worker says it timed: ms that bound what really ran (a worker cannot make the parent's
    clock run slow). The loop is sized by the reported time, but never longer than 8 loops'
    worth at the pace the parent saw during the rounds (a worker that under-reports gets a
    longer loop, not an unbounded one). The parent's own latency (a busy host, many graders in
    one process) only adds to the figure: when it reads more than 1.5x the report, the loop is
    run again 4x longer (twice at most) and the smallest figure kept, as each bounds the real
    time."""
    calls = int(info.get("calls_per_sample") or 1)
    pace = max(1e-4, min(paces) if paces else 1.0)
    claimed = max(1e-4, (sorted(samples)[len(samples) // 2] if samples else 1.0) * calls)
    loops = int(min(100000, max(3, settings.loop_ms / max(claimed, pace / 8))))
    best = None
    for attempt in range(3):
        sent = time.monotonic()
        control.send(f"loop {loops}")
        at, _ = _answer(name, control, "loop", timeout)
        wall = (at - sent) * 1e3 / (loops * calls)
        best = wall if best is None else min(best, wall)
        if best * calls <= 1.5 * claimed or loops >= 100000 or \
                info.get("method") == "cuda_events":  # host-bound there: no bound is taken
            break
        loops = min(100000, loops * 4)
    return best


def _turn_cis(result: dict, names) -> dict[str, float | None]:
    """``measure.turn_ci_pct`` over the turns the window's participants ``names`` took, those
    the window dropped left out (their turns are no reading of a time: None)."""
    medians, dropped = result.get("turn_medians_ms") or {}, result.get("dropped") or {}
    return turn_ci_pct({name: [m for _, m in medians.get(name) or ()] for name in names
                        if name not in dropped})


def _window_cis(samples: dict, result: dict, names, by_turns: bool) -> dict[str, float | None]:
    """Each participant's CI: its samples' (``median_ci_pct``), widened ``by_turns`` to the one
    its turns allow (``turn_ci_pct``); None while the samples are too few for one."""
    turns = _turn_cis(result, names) if by_turns else {}
    cis = {}
    for name in names:
        ci, by_turns = median_ci_pct(samples[name]), turns.get(name)
        cis[name] = ci if ci is None or by_turns is None else max(ci, by_turns)
    return cis


def _round_order(names: list[str], index: int, how: str, last: list[str]) -> list[str]:
    """The participants' order in round ``index`` (``WindowSettings.order``)."""
    if how == "mirror" and index % 2 and sorted(last) == sorted(names):
        return last[::-1]
    random.Random(index).shuffle(names)
    return names


TURN_STAMPS = ("received", "settled", "sampled", "checked")


def _turn_parts(parts: dict[str, list[float]], sent: float, got: float, stamps) -> None:
    """A turn's wall time by part, from the worker's own monotonic stamps (``TURN_STAMPS``,
    the host's clock, which every process reads alike): the command's way to the worker, its
    settling, its samples, its checks after them, and the answer's way back. The profile's,
    for where a window's time goes: a worker can write any stamps, so nothing is judged by
    them."""
    if not isinstance(stamps, list) or len(stamps) != len(TURN_STAMPS):
        return
    try:
        marks = [sent, *(float(t) for t in stamps), got]
    except (TypeError, ValueError, OverflowError):
        return
    if not all(math.isfinite(t) for t in marks):
        return
    names = ("to_worker", "settle", "samples", "checks", "to_parent")
    for name, begin, end in zip(names, marks, marks[1:]):
        parts.setdefault(name, []).append((end - begin) * 1e3)


def _witness_round(group: _Group, name: str, per_round: dict, timeout: float, result: dict,
                   when: str) -> None:
    """One round of ``name``'s work (a trusted participant: the reference), right before and
    right after the unseen checks, unsettled both times and kept out of its scored samples:
    how much the GPU itself slowed across the checks (``unseen_clock_ms``). A GEMM at the
    GPU's power cap ran its kernels 21-31% longer after an input drawn at a larger scale than
    before it, every call after that (H200): the same drop reaches the reference."""
    if name not in group.active:
        return
    try:
        with group.turn(name):
            got = group.ask(name, f"round {per_round.get(name, 3)}", "round", timeout)
    except WindowError:  # no reading: the checks' bounds stay as they are
        return
    if got is not None:
        result.setdefault("unseen_clock_ms", {})[when] = [float(t) for t in got[1]]


def _resize_together(group: _Group, ready: dict, asks: dict[str, int], timeout: float) -> None:
    """Tell every member in ``asks`` to capture its graph again with the calls it asked for,
    all at once, then take their answers: the window's record of each (calls per sample,
    estimate) is the new one. The members not capturing wait: that is not their own time."""
    began = time.monotonic()
    alone, group.alone = group.alone, False  # they capture side by side, nothing timed
    group.everyone()
    try:
        sent = [name for name, calls in asks.items()
                if group.ask(name, f"resize {calls}", "", 0, whole=True, send_only=True)]
    finally:
        group.alone = alone
    for name in sent:
        got = group.ask(name, None, "resized", timeout, whole=True)
        sized = got[1] if got is not None else {}
        if name in ready and sized.get("resized"):
            # (the count its preparation captured, for the profile: a spare graph of twice it,
            # ``spare_graph``, is what such a capture again in the window could have taken up)
            prepared = ready[name].get("calls_per_sample")
            ready[name].update({k: sized[k] for k in ("calls_per_sample", "estimate_ms")
                                if isinstance(sized.get(k), (int, float))}, resized=True,
                               prepared_calls=prepared)
    for name, control in group.active.items():
        if name not in asks:
            control.extend(time.monotonic() - began)
