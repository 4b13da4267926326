"""Timing windows, driven by the trusted parent: the reference and the candidate, each in its own
worker process, timed in one exclusive window per GPU, alternating in rounds.

A worker that reaches its timing step prepares a ``measure.Timer`` (warm-up, CUDA graph capture),
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

The lock is one file pair per physical GPU (``gpu_lock_path``) in a per-user runtime folder,
keyed by the GPU's UUID where ``nvidia-smi`` gives one, so every grader and validator of this
user on the host shares it, whatever ``CUDA_VISIBLE_DEVICES`` each was started with.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .harness import Control
from .measure import GpuLock, median_ci_pct, summarize
from .step_aside import StepAside

MAX_CALLS = 1 << 16  # calls per sample a member may ask its graph to be captured with


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
    rewarm_ms: float = 20.0  # warm-up of each later participant (clocks are already up)
    # Untimed work at the start of every turn; None: 40 ms on CUDA, else 0. A kernel at the
    # GPU's power cap (an fp16 GEMM on an H100) runs up to 10% fast for tens of ms after a
    # lighter participant's turn (or a pause) and reads its sustained time only after ~40 ms
    # (scripts/turn_probe.py): without it, such a kernel's median moved 10% between grades. Groups
    # settle too: unsettled, with 10 ms turns, 8 copies of a Triton fp16 GEMM graded as a group
    # read speedups 4-5% (2k) and 10-11% (4k) below the same answer graded alone, the reference
    # GEMM's turns running fast (H100). Their turns are longer instead (``round_ms``).
    settle_ms: float | None = None
    # Past the cap, rounds go on while a participant's CI is wider than this, for at most
    # ``overtime`` times the cap more; a timing still wider is marked ``precise: false``.
    ci_limit_pct: float = 5.0
    overtime: float = 1.0
    min_reps: int = 12  # samples per participant before the CI may stop the window
    max_reps: int = 2000
    loop_ms: float = 30.0  # parent-clock loop length for ``clock_check`` participants
    ready_timeout_s: float = 300.0  # a worker must be ready within this
    report_timeout_s: float = 60.0  # and answer each command within this

    @classmethod
    def from_dict(cls, values: dict | None) -> WindowSettings:
        known = cls.__dataclass_fields__
        return cls(**{k: v for k, v in (values or {}).items() if k in known})


class WindowError(RuntimeError):
    """A participant failed or went silent during the window."""

    def __init__(self, name: str, message: str):
        super().__init__(f"{name}: {message}")
        self.participant = name


# ---------------------------------------------------------------- the per-GPU lock

_GPUS: dict[str, tuple[str, str]] = {}  # nvidia-smi index -> (uuid, name)


def _gpu_table() -> dict[str, tuple[str, str]]:
    if not _GPUS:
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid,name",
                                  "--format=csv,noheader"], capture_output=True, text=True,
                                 timeout=30).stdout
        except (OSError, subprocess.SubprocessError):
            out = ""
        for line in out.splitlines():
            index, uuid, name = ([p.strip() for p in line.split(",", 2)] + ["", ""])[:3]
            if uuid:
                _GPUS[index] = (uuid, name)
        _GPUS.setdefault("", ("", ""))  # looked once
    return _GPUS


def _gpu_uuid(physical: str) -> str | None:
    """The full UUID of the GPU an index or a UUID names. CUDA takes a UUID's unique prefix
    too: it is completed from ``nvidia-smi``'s table, so every way of naming one GPU keys
    the same lock file."""
    if physical.startswith(("GPU-", "MIG-")):
        full = [uuid for uuid, _name in _gpu_table().values() if uuid.startswith(physical)]
        return full[0] if len(full) == 1 else physical
    return _gpu_table().get(physical, ("", ""))[0] or None


def _physical(device: str, env: dict | None) -> str:
    index = int(device.split(":")[1]) if ":" in device else 0
    visible = (env or {}).get("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES"))
    entries = [e.strip() for e in visible.split(",")] if visible else []
    return entries[index] if index < len(entries) else str(index)


def gpu_memory(device: str, env: dict | None = None) -> tuple[int, int] | None:
    """(free, total) bytes of the whole GPU behind ``device`` as a worker with ``env`` sees it,
    from ``nvidia-smi`` (no CUDA context, no torch: a tenth of a second where a worker that
    imports torch took 10-12 s while a grading run started); None on CPU, for a MIG instance
    or without ``nvidia-smi``."""
    if not device.startswith("cuda"):
        return None
    physical = _physical(device, env)
    uuid = _gpu_uuid(physical)
    if not uuid or uuid.startswith("MIG-"):
        return None
    try:
        out = subprocess.run(["nvidia-smi", "-i", uuid, "--query-gpu=memory.free,memory.total",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True,
                             timeout=30).stdout
        free, total = (int(v) * 2**20 for v in out.strip().split(","))
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return (free, total) if 0 <= free <= total and total > 0 else None


def gpu_name(device: str, env: dict | None = None) -> str | None:
    """The model name of the GPU behind ``device`` as a worker with ``env`` sees it (without
    initialising CUDA here); None on CPU or without ``nvidia-smi``."""
    if not device.startswith("cuda"):
        return None
    physical = _physical(device, env)  # an index, or a UUID from CUDA_VISIBLE_DEVICES
    uuid_named = _gpu_uuid(physical)
    for index, (uuid, name) in _gpu_table().items():
        if (physical == index or (uuid and uuid == uuid_named)) and name:
            return name
    return None


def runtime_folder() -> str:
    """A per-user folder for lock files (``$XDG_RUNTIME_DIR/kernelmill`` or ``/tmp``)."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    folder = os.path.join(base, "kernelmill") if base and os.path.isdir(base) else \
        os.path.join("/tmp", f"kernelmill-{os.getuid()}")
    os.makedirs(folder, mode=0o700, exist_ok=True)
    return folder


def gpu_lock_path(device: str, env: dict | None = None) -> str | None:
    """The lock path of the physical GPU behind ``device`` ("cuda", "cuda:1") as a worker with
    ``env`` sees it; None on CPU."""
    if not device.startswith("cuda"):
        return None
    physical = _physical(device, env)
    key = _gpu_uuid(physical) or f"gpu{physical}"
    path = os.path.join(runtime_folder(), key)
    for suffix in (".turn", ".main", ".windows"):  # exist before a confined worker opens them
        if not os.path.exists(path + suffix):
            open(path + suffix, "a").close()
    return path


# ---------------------------------------------------------------- the window

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
        if key != "late" and isinstance(value.get("late"), int):
            control.release_late(value["late"])
            control.send(f"late {value['late']}")
            continue
        if key not in value:
            raise WindowError(name, f"answered {sorted(value)[:3]}, expected {key!r}")
        return at, (value if whole else value[key])


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


def run_window(participants: dict[str, Control], *, lock: GpuLock,
               settings: WindowSettings | None = None, cuda: bool = True,
               start: Callable[[], None] | None = None, finish: Callable[[], None] | None = None,
               clock_check: tuple[str, ...] = (), unseen_check: tuple[str, ...] = (),
               gpu_handshake: bool = False, droppable: tuple[str, ...] = (),
               admit: Callable[[str, Any], str | None] | None = None) -> dict:
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
    leaves the window with the reason ``admit(name, checked)`` returns: it is never timed."""
    settings = settings or WindowSettings()
    cap_ms = settings.cap_ms if settings.cap_ms is not None else (3000.0 if cuda else 300.0)
    warm_ms = settings.warm_ms if settings.warm_ms is not None else (200.0 if cuda else 0.0)
    settle_ms = settings.settle_ms if settings.settle_ms is not None else \
        (40.0 if cuda else 0.0)
    settings = dataclasses.replace(settings, round_ms=settings.round_ms if settings.round_ms
                                   is not None else (10.0 if len(participants) <= 2 else 40.0))
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
        # one deadline for all: a participant that hangs costs the others its timeout once
        deadline = time.monotonic() + settings.ready_timeout_s
        if gpu_handshake:  # workers import outside the lock; GPU work waits for "go"
            asked_gpu: dict[str, dict] = {}
            for name in participants:
                _wait_crediting(group, name, asked_gpu, deadline)
                if group.ask(name, None, "gpu", max(0.1, deadline - time.monotonic())):
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
        if admit is not None:
            _admit(group, admit, deadline)
        for name in participants:
            _wait_crediting(group, name, ready, deadline)
            got = group.ask(name, None, "ready", max(0.1, deadline - time.monotonic()))
            if got is not None:
                ready[name] = got[1]
        if not group.gone():
            # members that left are told to stop and finish their checks: on the GPU, so
            # they end before the GPU is taken alone (each within its own time limit)
            group.await_dropped(deadline)
            stepper.release()
            held.close()  # shared -> exclusive: another window may come first
            holding[0] = False
            exclusive[0] = held.enter_context(_exclusive(group, lock, result))
            holding[0] = True
            for control in group.active.values():  # a child that left its member's
                control.find_strays()  # process group is stopped with it
            group.alone = result["others_stopped"] = True
            result["strays"] = {name: len(c.strays) for name, c in group.active.items()
                                if c.strays}
            since = lock.since_window_s()
            first_warm_ms = warm_ms
            if warm_ms and since is not None and since < settings.hot_s:
                first_warm_ms = min(warm_ms, settings.rewarm_ms)
                result["clocks_hot_s"] = round(since, 3)
            try:
                _timed_rounds(group, ready, samples, walls, paces, result, settings,
                              cap_ms, first_warm_ms, settle_ms, clock_check, unseen_check)
            finally:
                if "warm" in result.get("phases_ms", {}):  # the clocks were brought up
                    lock.window_ended()
                group.alone = False
                group.everyone()
            _step_back(group, lock, held, holding, exclusive, stepper)
        for control in group.active.values():
            control.send("stop")
    except WindowError as exc:
        result["error"] = {"participant": exc.participant, "message": str(exc)}
        for control in participants.values():
            control.send("stop")
    finally:
        if exclusive[0] is not None:  # a window that failed while timing: its members were
            exclusive[0].downgrade()  # told to stop; their checks run shared, with no gap
        try:
            if finish is not None:
                if not holding[0]:  # holding nothing: take the GPU shared
                    held.enter_context(lock.shared())
                finish()
        finally:
            stepper.close()
            held.close()
    result["stepped_aside"] = {"times": stepper.steps, "s": round(stepper.stepped_s, 3)}
    for name in participants:
        info = {k: v for k, v in (ready.get(name) or {}).items() if k != "method"}
        result["participants"][name] = summarize((ready.get(name) or {}).get("method"),
                                                 samples[name], wall_ms=walls.get(name), **info)
    return result


def _admit(group: _Group, admit: Callable[[str, Any], str | None], deadline: float) -> None:
    """Take each droppable participant's ``checked`` report as it comes (in any order: one
    slow member does not hold the others' answers back) and answer it: ``time``, or out of the
    window with ``admit``'s reason."""
    waiting = [name for name in group.droppable if name in group.active]
    while waiting and time.monotonic() < deadline:
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
            got = group.ask(name, None, "checked", max(0.1, deadline - time.monotonic()))
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


def _wait_crediting(group: _Group, name: str, ready: dict, deadline: float) -> None:
    """Wait for ``name``'s next report (or its end, or ``deadline``), crediting the time to
    every other participant that is waiting too: those in ``ready`` (already answered) and
    those whose report is in and not yet taken (they answered before their turn came). Waiting
    for a slower member (a long import, a hang until its own limit) is not their own time: on
    an H100 a member first in the order hung at import for 60 s and the three behind it, ready
    and waiting, were killed with it."""
    control = group.active.get(name)
    while control is not None and time.monotonic() < deadline:
        began = time.monotonic()
        if control.wait_report(min(0.5, max(0.0, deadline - began))) or control.ended:
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

    def await_dropped(self, deadline: float) -> None:
        """Wait (until ``deadline``) for the participants that left the window to end, their
        wait credited to the ones still in it."""
        for name in list(self.dropped):
            control = self.controls[name]
            while not control.ended and time.monotonic() < deadline:
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


def _step_back(group: _Group, lock: GpuLock, held: contextlib.ExitStack, holding: list,
               exclusive: list, stepper: StepAside) -> None:
    """After the timed rounds, before the members are told to stop: the GPU is let go and
    taken shared again behind any window already waiting, so waiting windows run back to back
    and the members' checks after the window (seconds of host work each: ghost calls, audit,
    output copies) wait for them, as new shared work does. Each waiting window had waited for
    the checks of the one before (grades of KernelBench-sized answers: a window of 1.3 s, then
    1.7 s of the previous member's checks, then the next window). The members are idle until
    ``stop``, which is sent only once the shared hold is back: none of their GPU work runs in
    another window. The wait is credited to their time limits."""
    held.close()
    exclusive[0] = None
    holding[0] = False
    with _crediting(group):
        stepper.hold(held.enter_context(lock.shared()))
    holding[0] = True


@contextlib.contextmanager
def _exclusive(group: _Group, lock: GpuLock, result: dict):
    """The GPU alone for the window (the wait credited to the members as it lasts); yields
    the held lock (``downgrade()`` turns it shared)."""
    asked = time.monotonic()
    with contextlib.ExitStack() as stack:
        with _crediting(group):  # another window may hold the GPU for long: not their time
            handle = stack.enter_context(lock.exclusive())
        result["exclusive_wait_ms"] = round((time.monotonic() - asked) * 1e3, 1)
        yield handle


def _timed_rounds(group: _Group, ready, samples, walls, paces, result, settings, cap_ms,
                  warm_ms, settle_ms, clock_check, unseen_check) -> None:
    """The exclusive part of ``run_window``: warm-up, rounds, clock and unseen checks."""
    began = time.monotonic()
    timeout = settings.report_timeout_s
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
    if asks:
        _resize_together(group, ready, asks, timeout)
        first = next(iter(group.active), None)
        if first is not None and warm_ms:  # the clocks, idle while they captured, back up
            with group.turn(first):
                group.ask(first, f"settle {settings.rewarm_ms:g}", "settle", timeout)
    phases = result.setdefault("phases_ms", {})
    mark = time.monotonic()
    phases["warm"] = round((mark - began) * 1e3, 1)
    per_round = {}
    for name, info in ready.items():
        sample_ms = max(1e-4, float(info.get("estimate_ms") or 1.0)) * \
            int(info.get("calls_per_sample") or 1)
        per_round[name] = int(min(200, max(3, settings.round_ms / sample_ms)))
    deadline = began + cap_ms / 1e3
    overheads: list[float] = []
    while not group.gone():
        round_began = time.monotonic()
        for name in list(group.active):
            room = settings.max_reps - len(samples[name])
            if room <= 0:
                continue
            reps = min(per_round[name], room)
            if settle_ms and group.ask(name, f"settle {settle_ms:g}", "settle", timeout) is None:
                continue
            sent = time.monotonic()
            got = group.ask(name, f"round {reps}", "round", timeout)
            if got is not None:
                samples[name].extend(float(t) for t in got[1])
                paces[name].append((got[0] - sent) * 1e3 / reps)
                # the turn's wall time past the device work it reports (a graph sample is two
                # replays, one untimed): the round trip's and the worker's own cost
                calls = int(ready.get(name, {}).get("calls_per_sample") or 1)
                work = sum(float(t) for t in got[1]) * calls * (2 if calls > 1 else 1)
                overheads.append((got[0] - sent) * 1e3 - work)
        result["rounds"] += 1
        for control in group.active.values():  # the others' turns are not its time
            control.extend(time.monotonic() - round_began)
        timed = [samples[name] for name in group.active]
        cis = [median_ci_pct(s) for s in timed]
        enough = all(len(s) >= settings.min_reps for s in timed)
        if enough and all(c is not None and c <= settings.ci_target_pct for c in cis):
            break
        if all(len(s) >= settings.max_reps for s in timed):
            break
        now = time.monotonic()
        if now >= deadline and all(len(s) >= 3 for s in timed):
            wide = any(c is None or c > settings.ci_limit_pct for c in cis)
            if not wide or now >= deadline + settings.overtime * cap_ms / 1e3:
                break
            result["overtime_ms"] = (now - deadline) * 1e3  # a noisy member: more rounds
    phases["rounds"], mark = round((time.monotonic() - mark) * 1e3, 1), time.monotonic()
    if overheads:
        result["turn_overhead_ms"] = round(sorted(overheads)[len(overheads) // 2], 2)
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
    for name in unseen_check:
        with group.turn(name):
            group.ask(name, "unseen", "unseen", timeout)
    phases["unseen"] = round((time.monotonic() - mark) * 1e3, 1)
    result["window_ms"] = (time.monotonic() - began) * 1e3


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
            ready[name].update({k: sized[k] for k in ("calls_per_sample", "estimate_ms")
                                if isinstance(sized.get(k), (int, float))}, resized=True)
    for name, control in group.active.items():
        if name not in asks:
            control.extend(time.monotonic() - began)


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
              "precise": None if ci is None or limit is None else ci <= limit,
              "reference_ms": ref["ms"], "candidate_ms": cand["ms"]}
    if window.get("clocks_hot_s") is not None:  # the clock warm-up was skipped
        timing["clocks_hot_s"] = window["clocks_hot_s"]
    # why a forward was not timed as a graph, and one that returned shared memory
    for name, part in (("reference", ref), ("candidate", cand)):
        for key in ("capture_error", "outputs_overlap"):
            if part.get(key):
                timing[f"{name}_{key}"] = part[key]
    return timing
