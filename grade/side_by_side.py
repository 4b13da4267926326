"""Workers side by side: work split into balanced parts, one thread per worker, and what a
group's timing window says to each candidate (its view, its stages, when its GPU work is done).
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from kernelmill.validate.harness import Control


def _split(items, size: int) -> list[list]:
    """``items`` in consecutive parts of ``size`` (the last may be shorter), balanced: 8 items
    of at most 3 per part are 3, 3, 2."""
    items = list(items)
    parts = -(-len(items) // max(1, size))
    base, extra = divmod(len(items), max(1, parts))
    out, at = [], 0
    for index in range(parts):
        n = base + (1 if index < extra else 0)
        out.append(items[at:at + n])
        at += n
    return out


def _side_by_side(fn, items) -> list:
    """``[fn(item) for item in items]``, each in its own thread (one alone runs here)."""
    items = list(items)
    if len(items) <= 1:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(max_workers=len(items)) as pool:
        return list(pool.map(fn, items))


def candidate_view(window: dict, name: str) -> dict:
    """One candidate's view of a group window: the reference and itself (as ``candidate``),
    the window's error or the candidate's own (it dropped out), and the group's size."""
    parts = window.get("participants") or {}
    dropped = (window.get("dropped") or {}).get(name)
    error = window.get("error") or ({"participant": "candidate", "message": dropped}
                                    if dropped else None)
    view = {k: v for k, v in window.items()
            if k not in ("participants", "dropped", "error", "ready_ms")}
    ready = {k: v for k, v in (window.get("ready_ms") or {}).items()
             if isinstance(v, (int, float))}
    if name in ready:  # when it was ready, and when the last of the window's participants was
        view.update(ready_ms=ready[name], last_ready_ms=max(ready.values()))
    view.update(participants={"reference": parts.get("reference") or {},
                              "candidate": parts.get(name) or {}},
                error=error, group=len(parts) - 1)
    return view


def stepped_by_stage(spans: list, started_at: float | None, stages: list[tuple[str, float]],
                     wall_s: float) -> dict[str, float]:
    """Seconds of ``spans`` (``(from, to)`` by ``time.monotonic``: when a window's members were
    stopped for other grades' windows, ``StepAside.spans``) within each stage of a run that
    started at ``started_at`` (its ``stages``: marks in seconds since then, as
    ``stage_seconds`` reads them); {} where either is unknown."""
    if started_at is None or not stages or not spans:
        return {}
    # (``start``: what came before the first mark, as ``stage_seconds`` names it)
    starts = [("start", started_at)] + [(name, started_at + at) for name, at in stages]
    ends = [at for _, at in starts[1:]] + [started_at + max(wall_s, stages[-1][1])]
    found: dict[str, float] = {}
    for (name, begin), end in zip(starts, ends):
        for low, high in spans:
            overlap = min(end, high) - max(begin, low)
            if overlap > 0:
                found[name] = found.get(name, 0.0) + overlap
    return {name: round(seconds, 3) for name, seconds in found.items()}


def fresh_calls_span(started_at: float | None, stages: list[tuple[str, float]]
                     ) -> tuple[float, float]:
    """When a candidate's worker made its calls on new inputs (its ``forward`` stage, until the
    next mark), by ``time.monotonic``; an empty span (``until`` before ``since``) where its
    start or that stage is unknown."""
    if started_at is None:
        return 0.0, -1.0
    for index, (name, at) in enumerate(stages):
        if name == "forward":
            until = stages[index + 1][1] if index + 1 < len(stages) else at
            return started_at + at, started_at + until
    return 0.0, -1.0


def stage_seconds(stages: list[tuple[str, float]], wall_s: float) -> dict[str, float]:
    """Seconds each worker stage lasted (until the next stage's mark or the run's end), by the
    parent's clock; ``start`` is what came before the first mark (process start, imports)."""
    spans: dict[str, float] = {"start": round(stages[0][1], 3)} if stages else {}
    ends = [at for _, at in stages[1:]] + [max(wall_s, stages[-1][1] if stages else 0.0)]
    for (name, at), until in zip(stages, ends):
        spans[name] = round(spans.get(name, 0.0) + until - at, 3)
    return spans


def stage_cpu_seconds(marks: list[tuple[str, float]], cpu_s: float | None) -> dict[str, float]:
    """CPU seconds of each worker stage (all its threads), from the CPU reading each stage's
    mark carried (``WorkerResult.stage_cpu``) until the next one's, the last until the run's
    whole ``cpu_s`` (where known); ``start`` is the CPU before the first mark. A reading that
    goes back (a forged mark) counts nothing."""
    spans: dict[str, float] = {"start": round(marks[0][1], 3)} if marks else {}
    ends = [cpu for _, cpu in marks[1:]] + [cpu_s if cpu_s is not None else None]
    for (name, cpu), until in zip(marks, ends):
        if until is not None:
            spans[name] = round(spans.get(name, 0.0) + max(0.0, until - cpu), 3)
    return spans


def unseen_steps(value) -> dict | None:
    """Where the unseen check's time went, as the candidate's worker says (wall ms of each
    hidden trial's steps: the part asked for and mapped, loaded into the inputs, its output
    looked at; the call itself is ``unseen_ms``): for the profile only, never judged; None where
    it says nothing usable."""
    unseen = value.get("unseen") if isinstance(value, dict) else None
    steps = unseen.get("steps_ms") if isinstance(unseen, dict) else None
    if not isinstance(steps, dict):
        return None
    kept = {str(k)[:16]: [round(float(v), 2) for v in values[:16]]
            for k, values in list(steps.items())[:8]
            if isinstance(values, list) and all(type(v) in (int, float) for v in values[:16])}
    return kept or None


def unseen_calls(value) -> dict | None:
    """The unseen check's calls as its worker timed them (ms per call: ``seen``, ``unseen``,
    ``after``, what the spare trial's trigger ``window_worker.reads_slow`` read) and, for a
    captured graph's replays, the time their kernels kept the GPU busy (``*_busy``: what the
    judge bounds), with ``required`` (the unseen trials it times always; more were spares)
    and ``gated`` (``timer.Timer.gated``: its replays' readings the device's span alone):
    for the profile only, never judged; None where it says nothing usable."""
    unseen = value.get("unseen") if isinstance(value, dict) else None
    if not isinstance(unseen, dict):
        return None
    kept: dict = {}
    for kind in ("seen", "unseen", "after"):
        for suffix, key in (("_ms", kind), ("_busy_ms", f"{kind}_busy")):
            values = unseen.get(kind + suffix)
            if isinstance(values, list) and values and \
                    all(type(v) in (int, float) for v in values[:16]):
                kept[key] = [round(float(v), 4) for v in values[:16]]
    if type(unseen.get("required")) is int:
        kept["required"] = unseen["required"]
    if type(unseen.get("gated")) is bool:
        kept["gated"] = unseen["gated"]
    return kept or None


def workers_device_mib(controls: dict[str, Control], read) -> dict[str, int]:
    """Each worker still running, by name: its device memory in MiB as ``read()`` (pid ->
    bytes, ``gpus.process_device_bytes``) gives it now, also kept as its control's
    ``device_mib``; {} without a reading."""
    try:  # (under the GPU's shared hold, in the window's end: never its failure)
        used = read() or {}
    except Exception:  # noqa: BLE001 — no reading
        return {}
    # an ended worker's pid may be another process's by now
    found = {name: round(used[control.pid] / 2**20) for name, control in controls.items()
             if not control.ended and control.pid in used}
    for name, mib in found.items():
        controls[name].device_mib = mib
    return found


def _gpu_work_done(controls: dict[str, Control], timeout_s: float,
                   read=None) -> dict[str, int]:
    """Wait (holding the GPU's lock shared) until every worker has said its GPU work is done
    or has ended; what follows (reading its profiler records, sending its facts) needs no
    lock, and the next window on this GPU need not wait for it. Then, given ``read``
    (``gpus.process_device_bytes``), each worker still running's device memory then, its
    context and allocator cache still held (``workers_device_mib``)."""
    deadline = time.monotonic() + timeout_s
    for control in controls.values():
        while not control.ended and time.monotonic() < deadline:
            got = control.next_report(max(0.1, deadline - time.monotonic()))
            if got is None or "gpu_done" in got[1]:
                break
    return workers_device_mib(controls, read) if read is not None else {}
