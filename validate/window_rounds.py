"""The exclusive part of a timing window (``window.run_window``): the first participant's
warm-up and whether the clocks are up already (``_first_warm_ms``), then the warm-up turns, the
rounds, the clock check and the unseen checks (``_timed_rounds``).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from .measure import GpuLock, _median
from .window_group import WindowError, _Group
from .window_turns import (
    _clock_check,
    _resize_together,
    _round_order,
    _turn_parts,
    _window_cis,
    _witness_round,
)

if TYPE_CHECKING:
    from .window import WindowSettings

MAX_CALLS = 1 << 16  # calls per sample a member may ask its graph to be captured with


def _first_warm_ms(lock: GpuLock, settings: WindowSettings, warm_ms: float,
                   activity: Callable[[], dict | None] | None, result: dict) -> float:
    """The first participant's warm-up: ``rewarm_ms`` where the clocks are up (a window on
    this GPU ended within ``hot_s``: ``clocks_hot_s``; or NVML read its clocks up just now:
    ``clocks_up``), else ``warm_ms``. The reading is kept (``clocks``) whenever one is
    taken."""
    if not warm_ms:
        return warm_ms
    since = lock.since_window_s()
    if since is not None and since < settings.hot_s:
        result["clocks_hot_s"] = round(since, 3)
        return min(warm_ms, settings.rewarm_ms)
    try:
        read = activity() if activity is not None else None
    except Exception:  # noqa: BLE001 — no reading: the full warm-up
        read = None
    if isinstance(read, dict):
        result["clocks"] = read
        if _clocks_up(read, settings):
            result["clocks_up"] = True
            return min(warm_ms, settings.rewarm_ms)
    return warm_ms


def _clocks_up(read: dict, settings: WindowSettings) -> bool:
    """Whether an NVML reading (``gpus.gpu_activity``) shows the GPU's clocks up: its SM clock
    at ``clock_pct`` of its highest or more."""
    sm, top = read.get("sm_mhz"), read.get("max_sm_mhz")
    if type(sm) not in (int, float) or type(top) not in (int, float) or not top > 0:
        return False
    return bool(settings.clock_pct) and sm >= top * settings.clock_pct / 100


class _Holds:
    """NVML's count of the time the power and thermal policies held the GPU's clocks back
    (``held_ns`` of ``activity()``), from a first reading on: ``grew()`` is True once it has
    grown, or where it cannot be read."""

    def __init__(self, activity: Callable[[], dict | None] | None):
        self.activity = activity
        self.first = self.last = self._read()

    def _read(self) -> int | None:
        try:
            read = self.activity() if self.activity is not None else None
        except Exception:  # noqa: BLE001 — no reading
            return None
        held = read.get("held_ns") if isinstance(read, dict) else None
        return held if type(held) is int else None

    def grew(self) -> bool:
        self.last = self._read()
        return self.first is None or self.last is None or self.last > self.first

    def held_ms(self) -> float | None:
        if self.first is None or self.last is None:
            return None
        return round((self.last - self.first) / 1e6, 3)


def _timed_rounds(group: _Group, ready, samples, walls, paces, result, settings, cap_ms,
                  warm_ms, settle_ms, clock_check, unseen_check, clock_witness=None,
                  activity=None, unscored=()) -> None:
    """The exclusive part of ``run_window``: warm-up, rounds, clock and unseen checks (the
    ``unscored`` participants warm up and witness, and take no turn in the rounds)."""
    began = time.monotonic()
    timeout = settings.report_timeout_s
    holds = _Holds(activity) if activity is not None else None
    # The clocks are the GPU's: the first participant brings them up; the others only
    # warm their own caches and buffers.
    # Each estimates one call alone on the GPU in its turn (``Timer.planned_calls``); those whose
    # graph that estimate sizes differently then capture again side by side (a capture runs no
    # kernel, and nothing is timed meanwhile): one after another, 8 members' captures of up to
    # 1024 forwards held the GPU alone 1-2.4 s of a group's window (H100).
    asks: dict[str, int] = {}
    for index, name in enumerate(list(group.active)):
        ms = warm_ms if index == 0 else min(warm_ms, settings.rewarm_ms)
        if ms:
            with group.turn(name):
                got = group.ask(name, f"warm {ms:g}", "warm", timeout, whole=True)
            calls = (got[1] if got is not None else {}).get("resize")
            if name in ready and type(calls) is int and 0 < calls <= MAX_CALLS:
                asks[name] = calls
    resize_s = 0.0
    if asks:
        resize_began = time.monotonic()
        _resize_together(group, ready, asks, timeout)
        first = next(iter(group.active), None)
        if first is not None and warm_ms:  # the clocks, idle while they captured, back up
            with group.turn(first):
                group.ask(first, f"settle {settings.rewarm_ms:g}", "settle", timeout)
        resize_s = time.monotonic() - resize_began
    # ``settle_if`` "held": rounds unsettled while no policy has held the clocks back
    unsettled_until_held = settings.settle_if == "held" and bool(settle_ms) and \
        holds is not None and not holds.grew()
    full_settle_ms = settle_ms
    if settings.settle_if == "held" and settle_ms:  # said either way, as "always" is not
        result["settled"] = not unsettled_until_held
    if unsettled_until_held:
        settle_ms = 0.0
    phases = result.setdefault("phases_ms", {})
    mark = time.monotonic()
    phases["warm"] = round((mark - began - resize_s) * 1e3, 1)
    if asks:  # the captures again and the clocks' settling after them
        phases["resize"] = round(resize_s * 1e3, 1)
    per_round, witness_reps = {}, {}
    # a long call's turn (one the floor of 3 samples binds) fills the minimum rounds, as long
    # as those rounds fit in the cap (a call of a quarter second keeps 3 a turn)
    rounds_wanted = max(1, settings.min_rounds)
    long_turn = max(3, -(-settings.min_reps // rounds_wanted)) if settings.min_rounds > 0 else 3
    for name, info in ready.items():
        sample_ms = max(1e-4, float(info.get("estimate_ms") or 1.0)) * \
            int(info.get("calls_per_sample") or 1)
        fits = settings.round_ms / sample_ms
        in_cap = int(cap_ms / (rounds_wanted * max(1, len(set(ready) - set(unscored)))
                               * sample_ms))
        per_round[name] = int(min(200, fits if fits >= 3 else
                                  max(3, min(long_turn, in_cap))))
        witness_reps[name] = int(min(200, max(3, fits)))  # one plain turn's worth
    deadline = began + cap_ms / 1e3
    last_deadline = deadline + cap_ms / 1e3  # a restart's own cap ends by this (``settle_if``)
    overheads: list[float] = []
    parts: dict[str, list[float]] = {}  # where each turn's wall time went (``_turn_parts``)
    order: list[str] = []
    last = None  # whose turn ran last: a turn right after its own needs no settling
    while not group.gone():
        round_began = time.monotonic()
        # each round in another order (the same for the same round of any window): no member
        # always follows the same one, or takes the same place in the round (a GPU at its
        # power cap runs a turn after a heavy one, or late in a round, at a lower clock)
        order = _round_order([n for n in group.active if n not in unscored], result["rounds"],
                             settings.order, order)
        for name in order:
            room = settings.max_reps - len(samples[name])
            if room <= 0:
                continue
            reps = min(per_round[name], room)
            # The turn's settling and its samples in one command (each command is a round
            # trip through a busy parent: 20 ms a turn at the median, KernelBench sizes, H200).
            # Without ``settle_same``, a turn that follows its own (mirrored rounds meet at
            # their ends) is not settled.
            settle = settle_ms if name != last or settings.settle_same else 0.0
            if settle_ms and not settle:  # the rounds whose turn of this member ran unsettled
                result.setdefault("unsettled_rounds", {}).setdefault(name, []).append(
                    result["rounds"])
            last = name
            turn_began = time.monotonic()
            asleep = " sleep" if settings.settle_wait == "sleep" else ""
            got = group.ask(name, f"round {reps} {settle:g}{asleep}" if settle else
                            f"round {reps}", "round", timeout, whole=True)
            if got is not None:
                at, report = got
                times = report.get("round") if isinstance(report, dict) else None
                try:
                    times = [float(t) for t in times]
                except (TypeError, ValueError, OverflowError):
                    group.fail(name, WindowError(name, "answered a round without its samples"))
                    continue
                if settle and (at - turn_began) * 1e3 < settle:
                    group.fail(name, WindowError(name, f"answered its turn in "
                                                       f"{(at - turn_began) * 1e3:.1f} ms, before "
                                                       f"the {settle:g} ms of settling asked"))
                    continue
                samples[name].extend(times)
                if times:  # [round, its turn's median]: the turn CI's readings
                    result.setdefault("turn_medians_ms", {}).setdefault(name, []).append(
                        [result["rounds"], round(_median(times), 6)])
                # the samples' pace by this clock, the settling included: read high, never low
                # (it bounds the clock check's loop)
                paces[name].append((at - turn_began) * 1e3 / reps)
                sent = turn_began + settle / 1e3
                # the turn's wall time past the device work it reports (a graph sample covered
                # by an untimed replay is two replays): the round trip's and the worker's cost
                info = ready.get(name, {})
                calls = int(info.get("calls_per_sample") or 1)
                graphed = info.get("method") == "cuda_graph"
                cover = info.get("cover", "replay") if graphed else None
                work = sum(times) * calls * (2 if cover == "replay" else 1)
                if cover == "queued" and times:  # one untimed replay before the samples
                    work += sorted(times)[len(times) // 2] * calls
                overheads.append((at - sent) * 1e3 - work)
                _turn_parts(parts, turn_began, at, report.get("at"))
        result["rounds"] += 1
        for control in group.active.values():  # the others' turns are not its time
            control.extend(time.monotonic() - round_began)
        if unsettled_until_held and holds.grew():
            # the clocks were held back: what was sampled unsettled is dropped, the rounds
            # start over with every turn settled and a cap of their own (ending no later than
            # a second cap after the first: the exclusive hold stays bounded)
            unsettled_until_held, settle_ms = False, full_settle_ms
            result["settled_over"] = result["rounds"]
            result["settled"] = True
            result["rounds"], result["overtime_ms"], last = 0, 0.0, None
            for name in samples:
                samples[name].clear()
                paces[name].clear()
            result.pop("turn_medians_ms", None)
            overheads.clear()
            parts.clear()
            deadline = min(time.monotonic() + cap_ms / 1e3, last_deadline)
            continue
        scored = [name for name in group.active if name not in unscored]
        timed = [samples[name] for name in scored]
        cis = list(_window_cis(samples, result, scored,
                               by_turns=settings.stop_on_turns).values())
        enough = all(len(s) >= settings.min_reps for s in timed) and \
            result["rounds"] >= settings.min_rounds
        if enough and all(c is not None and c <= settings.ci_target_pct for c in cis):
            break
        if all(len(s) >= settings.max_reps for s in timed):
            break
        now = time.monotonic()
        if now >= deadline and all(len(s) >= 3 for s in timed):
            wide = any(c is None or c > settings.ci_limit_pct for c in cis)
            if (not wide and result["rounds"] >= settings.min_rounds) or \
                    now >= deadline + settings.overtime * cap_ms / 1e3:
                break
            result["overtime_ms"] = (now - deadline) * 1e3  # a noisy member: more rounds
    phases["rounds"], mark = round((time.monotonic() - mark) * 1e3, 1), time.monotonic()
    if holds is not None:
        grew = holds.grew()
        if holds.held_ms() is not None:  # over the warm-up and the rounds
            result["clocks_held_ms"] = holds.held_ms()
        if unsettled_until_held and grew:  # held back after the last round's reading
            result["held_unsettled"] = True
    if overheads:
        result["turn_overhead_ms"] = round(sorted(overheads)[len(overheads) // 2], 2)
    if parts:
        result["turn_ms"] = {part: round(sorted(v)[len(v) // 2], 2) for part, v in parts.items()}
    for name in clock_check:
        if name in group.active:
            with group.turn(name):
                try:
                    walls[name] = _clock_check(name, group.active[name], ready[name],
                                               samples[name], paces[name], settings,
                                               timeout)
                except WindowError as exc:
                    group.fail(name, exc)
    phases["clock"], mark = round((time.monotonic() - mark) * 1e3, 1), time.monotonic()
    witnessed = clock_witness in ready and bool(unseen_check)
    witness_ms = 0.0
    if witnessed:
        _witness_round(group, clock_witness, witness_reps, timeout, result, "before")
        witness_ms = time.monotonic() - mark
    for name in unseen_check:
        with group.turn(name):
            group.ask(name, "unseen", "unseen", timeout)
    if witnessed:
        began_after = time.monotonic()
        _witness_round(group, clock_witness, witness_reps, timeout, result, "after")
        witness_ms += time.monotonic() - began_after
    phases["unseen"] = round((time.monotonic() - mark - witness_ms) * 1e3, 1)
    if witnessed:  # the reference's rounds around the checks (``unseen_clock_ms``)
        phases["witness"] = round(witness_ms * 1e3, 1)
    result["window_ms"] = (time.monotonic() - began) * 1e3
