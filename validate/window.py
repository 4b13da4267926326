"""Timing windows, driven by the trusted parent: the reference and the candidate, each in its own
worker process, timed in one exclusive window per GPU, alternating in rounds.

A worker that reaches its timing step prepares a ``timer.Timer`` (warm-up, CUDA graph capture),
reports ``{"ready": ...}`` and waits for commands (``window_worker.serve_window``). ``run_window``:

1. starts the workers; each imports, then asks for the GPU (``window_worker.await_gpu``) and is told
   "go" once the parent holds the GPU's lock *shared*, which it keeps while they run their
   checks and prepare (other graders may do the same; nobody times meanwhile);
2. takes it *exclusively* (writer priority: no new GPU work starts), warms the clocks through
   the first participant (the others briefly, for their own caches), then runs rounds
   (reference, candidate, reference, ...) until the 95% confidence half-width of every
   participant's median is under ``ci_target_pct`` or the time cap passes, so clock drift and
   thermal state hit both alike;
3. for the participants named in ``clock_check`` runs a back-to-back loop timed by the parent's
   own clock (a worker cannot speed up the parent's clock: ``wall_ms`` bounds what really ran);
   then asks those named in ``unseen_check`` to time single calls on inputs they have not seen
   (a forward that is fast only on inputs it has seen before shows there);
4. lets the GPU go, takes it shared again behind any window already waiting (windows run back
   to back; the workers' checks after the window wait for them), then sends ``stop`` and lets
   the workers finish.

The exclusive part (2-3) is ``window_rounds._timed_rounds``; the turns' pieces are in
``window_turns``. The lock is one set of files per physical GPU (``gpus.gpu_lock_path``).
"""
from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .harness import Control
from .measure import GpuLock, summarize
from .step_aside import StepAside
from .window_group import (  # noqa: F401 (WindowError: re-exported)
    WindowError,
    _admit,
    _answer,
    _crediting,
    _Group,
    _wait_crediting,
)
from .window_rounds import _first_warm_ms, _timed_rounds
from .window_turns import _turn_cis, _window_cis

SETTLE_WAITS = ("spin", "sleep")  # ``WindowSettings.settle_wait``
SETTLE_IFS = ("always", "held")  # ``WindowSettings.settle_if``
MEDIAN_ROUNDS = 64  # rounds whose per-participant medians a window keeps (``round_medians_ms``)


@dataclass
class WindowSettings:
    """Knobs of one timing window (every field has a measured default)."""

    ci_target_pct: float = 0.5  # stop when every median's 95% half-width is under this
    cap_ms: float | None = None  # wall-time cap of the rounds; None: 3 s on CUDA, 0.3 s on CPU
    # One participant's turn per round; None: 10 ms in a window of two, 40 ms in a group (each
    # of its turns is settled too, so a longer turn keeps the settling's share at half).
    round_ms: float | None = None
    warm_ms: float | None = None  # clock warm-up per participant; None: 200 ms CUDA, 0 CPU
    # A window that begins within this many seconds of the last one's end on the same GPU
    # (any grader or validator of this user) finds the clocks up: its first participant warms
    # for ``rewarm_ms`` like the others. Back-to-back windows are the case where the exclusive
    # window bounds a GPU's grading rate, and the full warm-up was a third of a window.
    hot_s: float = 1.0
    # A window that NVML (``gpus.gpu_activity``) finds with the GPU's SM clock at
    # ``clock_pct`` of its highest or more finds the clocks up too (0: only ``hot_s``
    # decides). Under load about half the windows are not within ``hot_s`` of the last one,
    # and their full warm-up was 250-340 ms of 0.96 s windows (KernelBench singles, 16 slots,
    # H200); NVML read the SM clock at its highest (1,980 MHz) at the start of every one of 51
    # such windows. The busy share NVML reads (0-16% in 49 of them) does not decide: it
    # covers a past sample period, which the members' own preparation fills.
    clock_pct: float = 95.0
    rewarm_ms: float = 20.0  # warm-up of each later participant (clocks are already up)
    # Untimed work at the start of every turn; None: 40 ms on CUDA, else 0. A kernel at the
    # GPU's power cap (an fp16 GEMM on an H100) runs up to 10% fast for tens of ms after a
    # lighter participant's turn (or a pause) and reads its sustained time only after ~40 ms
    # (scripts/turn_probe.py): without it, such a kernel's median moved 10% between grades. Groups
    # settle too: unsettled, with 10 ms turns, 8 copies of a Triton fp16 GEMM graded as a group
    # read speedups 4-5% (2k) and 10-11% (4k) below the same answer graded alone, the reference
    # GEMM's turns running fast (H100). Their turns are longer instead (``round_ms``).
    settle_ms: float | None = None
    # Settle a turn that follows the same participant's own turn too (mirrored rounds put
    # each pair's middle two turns together); None: not in a window of two, yes in a group.
    # Off: that turn runs unsettled (1 of a 2-round window's 4 turns), the GPU still in the
    # state its own samples left. On an H200, 341 such turns of Triton fp16 GEMM singles at
    # the power cap read their member's median (1.0004 at the median of per-turn ratios,
    # settled or not), and a 2-round window's rounds took 211-224 ms instead of 264. In a
    # group it is always the same member's turn (the last of the first round), and one pass
    # of groups of 8 is too noisy to say it reads as the others: on there until measured.
    settle_same: bool | None = None
    # How a graph timer's worker waits through a turn's settling: "spin" (samples, as the
    # warm-up takes them: the waits on timing events spin) or "sleep" (most of it queued at once
    # and slept through on a blocking event, ``Timer.settle``); the turn's samples are taken
    # alike. Asleep, Triton fp16 GEMM singles spent 0.3-0.7 CPU-s less in the candidate's
    # timing stage and 0.1-0.6 less in the reference's (H200), and each problem's median
    # speedup moved -0.65% to +0.7% against spinning over three A/B pairs, where passes of the
    # same setting moved up to 0.45% apart.
    settle_wait: str = "sleep"
    # When turns are settled: "always", or "held": only where NVML's violation counters
    # (``gpus.gpu_activity``'s ``held_ns``) show the power or thermal policy holding the clocks
    # back in this window. The counters are read before and after the warm-up turns; rounds
    # that begin unsettled start over, settled, at the first hold seen after a round. No
    # reading: settled. Settling is most of a small kernel's turn (40 of 70 ms). Against
    # "always" over two A/B pairs of singles (KernelBench and Triton answers, H100): windows
    # 931 ms against 1,082 at the mean (KernelBench rounds 174 ms against 321-341 at the
    # median); each answer's median speedup moved at most 0.43% where passes of "always" moved
    # 0.75% apart; spread over copies median 0.33%, max 3.8% against 0.73% and 6.5%. NVML saw
    # every window of an fp16 GEMM at the power cap held (12 of 12) and settled it, and its
    # counters first moved 120 ms into such a GEMM, then every 5 ms (scripts/held_probe.py).
    settle_if: str = "held"
    # Past the cap, rounds go on while a participant's CI is wider than this, for at most
    # ``overtime`` times the cap more; a timing still wider is marked ``precise: false``.
    ci_limit_pct: float = 5.0
    overtime: float = 1.0
    min_reps: int = 12  # samples per participant before the CI may stop the window
    # Rounds before the CI may stop the window. A long call's turn (one where ``round_ms``
    # holds fewer than 3 samples) holds ``min_reps / min_rounds`` samples (with a floor of 3,
    # KernelBench's 2-26 ms calls took four rounds, eight settled turns, before the first stop:
    # 606 ms of rounds at the median against 316-321 with two, H200, every median speedup within
    # 0.5%). Shorter samples keep their turns: an fp16 4096² GEMM at the power cap (1.7 ms
    # samples) given 6 a turn instead of 5 stopped at 12-36 samples where it had taken 45-55,
    # and its copies read 1.8-2.3% apart, against 0.1-0.7%. 0: no minimum, a floor of 3.
    min_rounds: int = 2
    # The participants' order in a round: "shuffle" (each round drawn anew, the same draw for
    # the same round of any window) or "mirror" (even rounds drawn, each odd round the one
    # before it reversed: over each pair a member's turns sit symmetrically about the pair's
    # middle, so a clock drifting steadily across the window moves every member's mean alike:
    # the two rounds of a long call's window are one such pair).
    order: str = "mirror"
    max_reps: int = 2000
    # Whether the rounds stop on a CI that counts turns (``measure.turn_ci_pct``) rather than on
    # the samples' alone. A turn's samples share the GPU's state of that moment, so a summary's
    # ``ci_pct`` always counts turns; stopping on it too made fp16 GEMM windows 4x longer
    # (rounds 0.56 -> 2.1 s, H200) for no measured gain across copies: their spread is
    # mostly between windows, which no window's CI sees.
    stop_on_turns: bool = False
    loop_ms: float = 30.0  # parent-clock loop length for ``clock_check`` participants
    ready_timeout_s: float = 300.0  # a worker must be ready within this
    report_timeout_s: float = 60.0  # and answer each command within this

    def __post_init__(self) -> None:
        if self.settle_wait not in SETTLE_WAITS:
            raise ValueError(f"settle_wait {self.settle_wait!r}: expected one of {SETTLE_WAITS}")
        if self.settle_if not in SETTLE_IFS:
            raise ValueError(f"settle_if {self.settle_if!r}: expected one of {SETTLE_IFS}")

    @classmethod
    def from_dict(cls, values: dict | None) -> WindowSettings:
        known = cls.__dataclass_fields__
        return cls(**{k: v for k, v in (values or {}).items() if k in known})


# ---------------------------------------------------------------- the window

def run_window(participants: dict[str, Control], *, lock: GpuLock,
               settings: WindowSettings | None = None, cuda: bool = True,
               start: Callable[[], None] | None = None, finish: Callable[[], None] | None = None,
               clock_check: tuple[str, ...] = (), unseen_check: tuple[str, ...] = (),
               gpu_handshake: bool = False, droppable: tuple[str, ...] = (),
               admit: Callable[[str, Any], str | None] | None = None,
               clock_witness: str | None = None,
               activity: Callable[[], dict | None] | None = None,
               unscored: tuple[str, ...] = ()) -> dict:
    """Time ``participants`` (name -> a running worker's ``Control``) in one window.

    ``start`` launches the workers; with ``gpu_handshake`` each asks for the GPU
    (``window_worker.await_gpu``) and gets "go" once the shared lock is held, else the lock is taken
    right after ``start``. ``finish`` waits for them (after ``stop``, under the shared lock).
    Returns ``{"participants": {name: summary}, "rounds", "window_ms", "error", "dropped"}``; a
    summary is ``measure.summarize`` of the samples plus the worker's ``ready`` description and,
    for ``clock_check``, ``wall_ms`` per call. Participants in ``unseen_check`` then time single
    calls on inputs they have not seen, still alone on the GPU (``window_worker.serve_window``'s
    ``unseen``; the results stay in the worker). A participant in ``droppable`` that fails
    (ends, goes silent, answers wrongly) leaves the window alone: ``dropped[name]`` says why and
    the others go on; when none of them is left, the window ends. Any other failure ends the
    window for all (``error``). With ``admit``, each ``droppable`` participant first reports
    ``{"checked": ...}`` (its answers, before it prepares to be timed) and is told ``time``, or
    leaves the window with the reason ``admit(name, checked)`` returns: it is never timed.
    ``clock_witness`` (a trusted participant) runs one unscored round right before and right
    after the unseen checks (``unseen_clock_ms``: ``before`` and ``after`` samples).
    ``activity()`` reads what the GPU was doing as the window took it alone
    (``gpus.gpu_activity``; the result's ``clocks``): its clocks up (``_clocks_up``), the
    first participant warms for ``rewarm_ms`` only (``clocks_up``). Participants in
    ``unscored`` warm up and serve as ``clock_witness`` but take no turn in the rounds (their
    summary has no samples): the rounds hold the others alone, and stop on their CIs."""
    settings = settings or WindowSettings()
    cap_ms = settings.cap_ms if settings.cap_ms is not None else (3000.0 if cuda else 300.0)
    warm_ms = settings.warm_ms if settings.warm_ms is not None else (200.0 if cuda else 0.0)
    settle_ms = settings.settle_ms if settings.settle_ms is not None else \
        (40.0 if cuda else 0.0)
    settings = dataclasses.replace(
        settings, round_ms=settings.round_ms if settings.round_ms is not None else
        (10.0 if len(participants) <= 2 else 40.0),
        settle_same=settings.settle_same if settings.settle_same is not None else
        len(participants) > 2)
    ready: dict[str, dict] = {}
    samples: dict[str, list[float]] = {name: [] for name in participants}
    walls: dict[str, float] = {}
    paces: dict[str, list[float]] = {name: [] for name in participants}  # parent ms per sample
    result: dict = {"participants": {}, "rounds": 0, "window_ms": None, "error": None,
                    "dropped": {}, "ci_limit_pct": settings.ci_limit_pct, "overtime_ms": 0.0}
    group = _Group(participants, droppable, result)
    stepper = StepAside(group)  # the shared hold steps aside at the members' safe points
    stepper.attach()
    # From "go" to the workers' end the window holds the GPU's lock: shared while they check,
    # exclusive while it times, shared again (no gap) for their checks after it.
    held, holding, exclusive = contextlib.ExitStack(), [False], [None]
    try:
        if start is not None:
            start()
        # one deadline for all: a participant that hangs costs the others its timeout once;
        # it moves on by the time members were kept at their points of stepping aside
        deadline = time.monotonic() + settings.ready_timeout_s

        def due() -> float:
            return deadline + stepper.delay_s

        if gpu_handshake:  # workers import outside the lock; GPU work waits for "go"
            asked_gpu: dict[str, dict] = {}
            for name in participants:
                _wait_crediting(group, name, asked_gpu, due)
                if group.ask(name, None, "gpu", max(0.1, due() - time.monotonic())):
                    asked_gpu[name] = {}
        asked = time.monotonic()
        with _crediting(group):  # other grades' time, not theirs
            stepper.hold(held.enter_context(lock.shared()))
            holding[0] = True
        waited = time.monotonic() - asked
        result["shared_wait_ms"] = round(waited * 1e3, 1)
        deadline += waited
        if gpu_handshake:
            for control in group.active.values():
                control.send("go")
        went = time.monotonic()
        if admit is not None:
            _admit(group, admit, due)
        for name in participants:
            _wait_crediting(group, name, ready, due)
            got = group.ask(name, None, "ready", max(0.1, due() - time.monotonic()))
            if got is not None:
                ready[name] = got[1]
                # when each said it was ready, from the shared hold's start (the profile's: a
                # group's window waits for its last member)
                result.setdefault("ready_ms", {})[name] = round((got[0] - went) * 1e3, 1)
        if not group.gone():
            # members that left are told to stop and finish their checks: on the GPU, so
            # they end before the GPU is taken alone (each within its own time limit)
            group.await_dropped(due)
            stepper.release()
            held.close()  # shared -> exclusive: another window may come first
            holding[0] = False
            exclusive[0] = held.enter_context(_exclusive(group, lock, result))
            took = time.monotonic()
            holding[0] = True
            for control in group.active.values():  # a child that left its member's
                control.find_strays()  # process group is stopped with it
            group.alone = result["others_stopped"] = True
            result["strays"] = {name: len(c.strays) for name, c in group.active.items()
                                if c.strays}
            first_warm_ms = _first_warm_ms(lock, settings, warm_ms, activity, result)
            # the GPU held alone before the rounds (strays looked for, clocks read)
            result["exclusive_setup_ms"] = round((time.monotonic() - took) * 1e3, 1)
            try:
                _timed_rounds(group, ready, samples, walls, paces, result, settings,
                              cap_ms, first_warm_ms, settle_ms, clock_check, unseen_check,
                              clock_witness, activity, unscored)
            finally:
                if "warm" in result.get("phases_ms", {}):  # the clocks were brought up
                    lock.window_ended()
                group.alone = False
                group.everyone()
            released = _step_back(group, lock, held, holding, exclusive, stepper)
            # the whole exclusive hold, the window's own parts and what came before and after
            result["exclusive_held_ms"] = round((released - took) * 1e3, 1)
        for control in group.active.values():
            control.send("stop")
    except WindowError as exc:
        result["error"] = {"participant": exc.participant, "message": str(exc)}
        for control in participants.values():
            control.send("stop")
    finally:
        if exclusive[0] is not None:  # a window that failed while timing: its members were
            exclusive[0].downgrade()  # told to stop; their checks run shared, with no gap
            stepper.hold(exclusive[0])
        try:
            if finish is not None:
                if not holding[0]:  # holding nothing: take the GPU shared
                    stepper.hold(held.enter_context(lock.shared()))
                finish()
        finally:
            stepper.close()
            held.close()
    result["stepped_aside"] = {"times": stepper.steps, "s": round(stepper.stepped_s, 3)}
    result["stepped_spans"] = stepper.spans  # (``side_by_side.stepped_by_stage``)
    result["stretch_spans"] = dict(stepper.stretches)  # each member's longest, likewise
    result["asides"] = {name: {"times": n, "s": round(s, 3)}  # its compiles' host work
                        for name, (n, s) in stepper.asides.items()}
    cis = _window_cis(samples, result, participants, by_turns=True)
    turns = _turn_cis(result, participants)
    medians = result.pop("turn_medians_ms", {})
    unsettled = result.pop("unsettled_rounds", {})
    for name in participants:
        # what the worker said when ready, under what the parent measured and counted
        info = {k: v for k, v in (ready.get(name) or {}).items() if k != "method"}
        summary = summarize((ready.get(name) or {}).get("method"), samples[name])
        result["participants"][name] = {
            **info, **summary, "ci_pct": cis[name], "samples_ci_pct": summary["ci_pct"],
            "turn_ci_pct": turns.get(name), "turns": len(medians.get(name) or ()),
            "wall_ms": walls.get(name),
            "round_medians_ms": (medians.get(name) or [])[:MEDIAN_ROUNDS] or None,
            # the rounds (of those) where its turn followed its own unsettled (``settle_same``)
            "unsettled_rounds": [r for r in unsettled.get(name) or () if r < MEDIAN_ROUNDS]}
    return result


def _step_back(group: _Group, lock: GpuLock, held: contextlib.ExitStack, holding: list,
               exclusive: list, stepper: StepAside) -> float:
    """After the timed rounds, before the members are told to stop: the GPU is let go and
    taken shared again behind any window already waiting, so waiting windows run back to back
    and the members' checks after the window (seconds of host work each: ghost calls, audit,
    output copies) wait for them, as new shared work does. Each waiting window had waited for
    the checks of the one before (grades of KernelBench-sized answers: a window of 1.3 s, then
    1.7 s of the previous member's checks, then the next window). The members are idle until
    ``stop``, which is sent only once the shared hold is back: none of their GPU work runs in
    another window. The wait is credited to their time limits. A member that left during the
    rounds was told to stop then and may be at work: the hold turns shared with no gap, as
    when a window fails. Returns when the GPU stopped being held alone (``time.monotonic``)."""
    if any(not group.controls[name].ended for name in group.dropped):
        exclusive[0].downgrade()
        released = time.monotonic()
        stepper.hold(exclusive[0])
        exclusive[0] = None
        return released
    held.close()
    released = time.monotonic()
    exclusive[0] = None
    holding[0] = False
    with _crediting(group):
        stepper.hold(held.enter_context(lock.shared()))
    holding[0] = True
    return released


@contextlib.contextmanager
def _exclusive(group: _Group, lock: GpuLock, result: dict):
    """The GPU alone for the window (the wait credited to the members as it lasts); yields
    the held lock (``downgrade()`` turns it shared)."""
    asked = time.monotonic()
    with contextlib.ExitStack() as stack:
        with _crediting(group):  # another window may hold the GPU for long: not their time
            handle = stack.enter_context(lock.exclusive())
        result["exclusive_wait_ms"] = round((time.monotonic() - asked) * 1e3, 1)
        result["exclusive_queue_ms"] = round(handle.queued_s * 1e3, 1)
        result["exclusive_drain_ms"] = round(handle.drained_s * 1e3, 1)
        yield handle


def verdict_timing(window: dict, reference: str = "reference",
                   candidate: str = "candidate") -> dict | None:
    """``{method, reps, ci_pct, precise, reference_ms, candidate_ms}`` of a window, for the
    verdict (``precise``: the CI is within the window's ``ci_limit_pct``)."""
    parts = window.get("participants") or {}
    ref, cand = parts.get(reference) or {}, parts.get(candidate) or {}
    if window.get("error") or ref.get("ms") is None or cand.get("ms") is None:
        return None
    methods = {ref.get("method"), cand.get("method")}
    cis = [c for c in (ref.get("ci_pct"), cand.get("ci_pct")) if c is not None]
    ci = max(cis) if cis else None
    limit = window.get("ci_limit_pct")
    timing = {"method": ref["method"] if len(methods) == 1 else
              f"{ref.get('method')}/{cand.get('method')}",
              "reps": min(ref["reps"], cand["reps"]), "ci_pct": ci,
              # a timing taken unsettled while a policy held the clocks back is not precise
              "precise": None if ci is None or limit is None else
              ci <= limit and not window.get("held_unsettled"),
              "reference_ms": ref["ms"], "candidate_ms": cand["ms"]}
    # the clock warm-up was skipped, and why; how long the power and thermal policies held the
    # clocks back; rounds left unsettled, or started over settled (``settle_if``)
    for key in ("clocks_hot_s", "clocks_up", "clocks_held_ms", "settled", "settled_over",
                "held_unsettled"):
        if window.get(key) is not None:
            timing[key] = window[key]
    # why a forward was not timed as a graph, and one that returned shared memory
    for name, part in (("reference", ref), ("candidate", cand)):
        for key in ("capture_error", "outputs_overlap"):
            if part.get(key):
                timing[f"{name}_{key}"] = part[key]
    return timing
