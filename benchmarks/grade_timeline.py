"""Where a pass's grades were over time (``grade_throughput.py``, ``gpu_queue.py``): grades in
flight by stage over the steady part (``in_flight``), the GPU's timing windows' states
(``window_states``), the candidate's stages under its window's shared hold
(``held_host_share``), the verdicts' waves (``verdict_waves``), the windows beside another
worker's CUDA context being made against their timings' precision (``windows_beside_inits``),
what of a grade's candidate phase needs no inputs (``before_inputs``), and their report
(``report_in_flight``)."""
from __future__ import annotations

import itertools
import json
import statistics
from pathlib import Path


def _spans(rows: list[dict]) -> list[tuple[str, float, float]]:
    """Each verdict's stages as (stage, began, ended) on the grading host's clock, laid end to
    end from its ``began_at`` (``in_flight`` says which stages)."""
    spans: list[tuple[str, float, float]] = []
    for row in rows:
        profile = row.get("profile") or {}
        began = profile.get("began_at")
        if not isinstance(began, (int, float)) or profile.get("candidate_s") is None:
            continue
        at = began
        parts = profile.get("reference_forward_s") or {}
        for stage, seconds in (profile.get("reference_stages_s") or {}).items():
            if stage == "reference forward" and parts:  # its parts, one after another
                measured = {k: max(0.0, v) for k, v in parts.items()
                            if isinstance(v, (int, float))}
                fit = min(1.0, seconds / sum(measured.values())) if sum(measured.values()) \
                    else 0.0
                for part, part_s in measured.items():
                    spans.append((f"reference: forward {part}", at, at + part_s * fit))
                    at += part_s * fit
                seconds -= sum(measured.values()) * fit
            spans.append((f"reference: {stage}", at, at + seconds))
            at += seconds
        at = began + (profile.get("reference_s") or 0.0)
        end = at + profile["candidate_s"]
        aside = profile.get("stepped_aside_by_stage") or {}
        for stage, seconds in (profile.get("stages_s") or {}).items():
            if stage == "timing":  # the window's own parts of it, the rest its preparation
                for part, part_s in _timing_parts(profile, seconds).items():
                    spans.append((f"candidate: timing {part}", at, at + part_s))
                    at += part_s
                continue
            # stopped for other grades' windows in this stage, where the verdict says
            stopped = min(seconds, aside.get(stage) or 0.0) if isinstance(
                aside.get(stage), (int, float)) else 0.0
            if stopped:
                spans.append(("candidate: stepped aside", at, at + stopped))
                at += stopped
            spans.append((f"candidate: {stage}", at, at + seconds - stopped))
            at += seconds - stopped
        judge = min(max(0.0, end - at), profile.get("judge_s") or 0.0)
        spans.append(("parent judge", end - judge, end))
        spans.append(("parent other", at, end - judge))
    return spans


def in_flight(rows: list[dict], share: tuple[float, float] = (0.3, 0.9)) -> tuple[float, dict]:
    """Where the grades in flight were, on average, between ``share`` of a phase's span (its
    steady part: the start's wave and the cut's tail left out): each verdict's reference
    stages (its forward's parts where it gives them: stepped aside for other grades' windows,
    files written, the rest), then its candidate worker's (its timing stage's parts:
    ``_timing_parts``; of the others, the seconds its workers were stopped for other grades'
    windows, ``stepped aside``), then the grading process's own time
    around that
    worker (``parent judge``: the judge's seconds; ``parent other``: admission, the job's
    preparation, a group's wait for its slowest member). Returns the span's seconds and the
    mean number of grades in each stage (Little's law: the stages that hold the most grades
    are those a faster stage of the same work would free slots from)."""
    spans = _spans(rows)
    if not spans:
        return 0.0, {}
    lo, hi = _steady([a for _, a, _ in spans] + [b for _, _, b in spans], share)
    held: dict[str, float] = {}
    for stage, a, b in spans:
        if min(b, hi) > max(a, lo):
            held[stage] = held.get(stage, 0.0) + min(b, hi) - max(a, lo)
    return hi - lo, {k: v / (hi - lo) for k, v in held.items()}


def window_states(rows: list[dict], share: tuple[float, float] = (0.3, 0.9)) -> dict[str, float]:
    """Over the same steady part as ``in_flight``, the share of the time a timing window held
    the GPU (``held``), a window was asked for but none held it (``asked``: the windows' own
    hand-overs), and no window was held or asked for (``none``: no grade was ready to be timed).
    Single grades are bound by the window only where ``none`` is small; where it is large, by
    the time grades take to reach their windows."""
    spans = _spans(rows)
    if not spans:
        return {}
    lo, hi = _steady([a for _, a, _ in spans] + [b for _, _, b in spans], share)
    if hi <= lo:
        return {}
    held = [(a, b) for stage, a, b in spans if stage == "candidate: timing window"]
    asked = [(a, b) for stage, a, b in spans if stage == "candidate: timing exclusive wait"]
    held_s = _union_s(held, lo, hi)
    busy_s = _union_s(held + asked, lo, hi)
    span = hi - lo
    return {"held": held_s / span, "asked": (busy_s - held_s) / span, "none": 1 - busy_s / span}


def verdict_waves(rows: list[dict], share: tuple[float, float] = (0.3, 0.9)) -> dict:
    """How the verdicts' ends fell over the same steady part as ``in_flight``: the gaps
    between consecutive ends (``gap_median_s``, ``gap_max_s``) and their burstiness
    ``(sd - mean) / (sd + mean)`` (Goh and Barabasi): about 0 for ends at random, -1 evenly
    spaced, toward 1 in waves (grades moving in lockstep: many ends at once, then none for
    seconds). Empty with fewer than 3 ends there."""
    ends = sorted(p["began_at"] + p["reference_s"] + p["candidate_s"]
                  for p in (row.get("profile") or {} for row in rows)
                  if all(isinstance(p.get(k), (int, float))
                         for k in ("began_at", "reference_s", "candidate_s")))
    if len(ends) < 3:
        return {}
    lo, hi = _steady(ends, share)
    steady = [t for t in ends if lo <= t <= hi]
    gaps = [b - a for a, b in itertools.pairwise(steady)]
    if len(gaps) < 2:
        return {}
    mean, sd = statistics.fmean(gaps), statistics.pstdev(gaps)
    return {"ends": len(steady), "gap_median_s": statistics.median(gaps),
            "gap_max_s": max(gaps),
            "burstiness": (sd - mean) / (sd + mean) if sd + mean > 0 else 0.0}


# The candidate worker's stages held under its window's shared hold (from its "go" until it
# reports its GPU work done after the ghost check: ``side_by_side._gpu_work_done`` lets the
# hold go, and reading its profiler records, its result and sending them are not held), the
# timing stage aside (its window held the GPU alone); in the worker's order
HELD_STAGES = ("setup", "import", "init", "profiler start", "forward", "forward refill",
               "forward repeat", "early check", "after timing", "graph check", "audit", "ghost")


def held_host_share(rows: list[dict]) -> dict:
    """Per candidate stage held shared (``HELD_STAGES``), the median wall seconds less the time
    its workers were stopped for other grades' windows, and the median CPU seconds of the
    worker: a stage whose CPU is near its wall is host work holding the GPU shared (what
    ``benchmarks/gpu_queue.py --held`` models moving out). ``total``: the grades' medians of
    the sums. Empty where no verdict gives both."""
    per_stage: dict[str, tuple[list[float], list[float]]] = {}
    totals: tuple[list[float], list[float]] = ([], [])
    for row in rows:
        profile = row.get("profile") or {}
        wall, cpu = profile.get("stages_s") or {}, profile.get("stages_cpu_s") or {}
        aside = profile.get("stepped_aside_by_stage") or {}
        sums = [0.0, 0.0]
        for stage in HELD_STAGES:
            if not isinstance(wall.get(stage), (int, float)) or \
                    not isinstance(cpu.get(stage), (int, float)):
                continue
            stopped = aside.get(stage) if isinstance(aside.get(stage), (int, float)) else 0.0
            held = max(0.0, wall[stage] - stopped)
            per_stage.setdefault(stage, ([], []))[0].append(held)
            per_stage[stage][1].append(cpu[stage])
            sums[0] += held
            sums[1] += cpu[stage]
        if sums[0] > 0:
            totals[0].append(sums[0])
            totals[1].append(sums[1])
    if not totals[0]:
        return {}
    found = {stage: (statistics.median(w), statistics.median(c))
             for stage, (w, c) in per_stage.items()}
    found["total"] = (statistics.median(totals[0]), statistics.median(totals[1]))
    return found


def _steady(times: list[float], share: tuple[float, float]) -> tuple[float, float]:
    """The steady part of a phase whose events span ``times``: from ``share[0]`` to
    ``share[1]`` of that span (the start's wave and the cut's tail left out)."""
    first, last = min(times), max(times)
    return first + (last - first) * share[0], first + (last - first) * share[1]


def _union_s(intervals: list[tuple[float, float]], lo: float, hi: float) -> float:
    """Seconds of [lo, hi] that the union of ``intervals`` covers."""
    total, end = 0.0, lo
    for a, b in sorted((max(a, lo), min(b, hi)) for a, b in intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def _timing_parts(profile: dict, seconds: float) -> dict[str, float]:
    """A candidate's timing stage split: its timer's preparation (warm-up, estimate, capture,
    where the verdict says), its wait for the window's last participant to be ready, the
    window's wait for the GPU alone, the window itself, and the rest (the step back after the
    window), each at most what is left of the stage."""
    def number(key: str, scale: float = 1.0) -> float:
        value = profile.get(key)
        return max(0.0, value * scale) if isinstance(value, (int, float)) else 0.0

    prepare = (profile.get("prepare_ms") or {}).get("candidate")
    parts, left = {}, seconds
    for part, value in (("prepare", max(0.0, prepare / 1e3) if isinstance(
                            prepare, (int, float)) else 0.0),
                        ("for the last ready", number("last_ready_ms", 1e-3) -
                         number("ready_ms", 1e-3)),
                        ("exclusive wait", number("exclusive_wait_ms", 1e-3)),
                        ("window", number("window_ms", 1e-3))):
        parts[part] = min(max(0.0, value), left)
        left -= parts[part]
    parts["other"] = left
    return parts


def windows_beside_inits(rows: list[dict], margin_s: float = 0.02) -> dict:
    """The timed verdicts' windows split by whether another grade's worker was making its CUDA
    context (its ``cuda init`` stage, not the wait for the lock before it) during the window
    (more than ``margin_s`` of overlap, on the spans ``_spans`` lays out): for each side, the
    windows and those whose timing was not precise (``timing.precise`` false). A context made
    while a window timed the GPU alone disturbed it (``gpus.init_lock``)."""
    spans = [(i, stage, a, b) for i, row in enumerate(rows) for stage, a, b in _spans([row])]
    inits = [(i, a, b) for i, stage, a, b in spans if stage.endswith(": cuda init")]
    counts = {"beside": [0, 0], "apart": [0, 0]}  # [windows, not precise]
    for i, stage, a, b in spans:
        timing = rows[i].get("timing") or {}
        if stage != "candidate: timing window" or "precise" not in timing:
            continue
        beside = any(j != i and min(b, y) - max(a, x) > margin_s for j, x, y in inits)
        side = counts["beside" if beside else "apart"]
        side[0] += 1
        side[1] += timing["precise"] is False
    return counts if counts["beside"][0] + counts["apart"][0] else {}


# A candidate worker's stages before it needs its inputs or the candidate's code: its start,
# CUDA context (and the wait for the GPU's lock to make it), confinement, the target's import,
# the guards' setup (not ``run target``, which waits for the GPU's shared hold)
BEFORE_INPUTS = ("start", "worker main", "cuda init wait", "cuda init", "confine",
                 "import target", "setup")


def before_inputs(rows: list[dict]) -> dict | None:
    """Each grade's latency, medians in seconds: its wait for memory (``admission_s``), its
    reference and candidate phases, and the candidate worker's stages before it needs its
    inputs (``BEFORE_INPUTS``; ``before_inputs_s``); ``overlap_share``: those stages, each grade's
    no longer than its reference phase, over both phases' seconds together (what a candidate's
    worker started beside its reference run could overlap); ``started_early``: the grades
    whose candidate worker did start so (``KERNELMILL_EARLY_CANDIDATES``: a ``payload wait``
    stage), ``payload_wait_s`` their wait at the median. None without profiles."""
    kept, waits = [], []
    for row in rows:
        profile = row.get("profile") or {}
        stages = profile.get("stages_s") or {}
        reference, candidate = profile.get("reference_s"), profile.get("candidate_s")
        if not isinstance(reference, (int, float)) or not isinstance(candidate, (int, float)) \
                or not stages:
            continue
        early = sum(v for k, v in stages.items() if k in BEFORE_INPUTS
                    and isinstance(v, (int, float)))
        kept.append((float(profile.get("admission_wait_s") or 0.0), reference, candidate, early))
        if isinstance(stages.get("payload wait"), (int, float)):
            waits.append(stages["payload wait"])
    if not kept:
        return None
    both = sum(r + c for _, r, c, _ in kept)
    return {"started_early": len(waits),
            "payload_wait_s": statistics.median(waits) if waits else None,
            "admission_s": statistics.median(k[0] for k in kept),
            "reference_s": statistics.median(k[1] for k in kept),
            "candidate_s": statistics.median(k[2] for k in kept),
            "before_inputs_s": statistics.median(k[3] for k in kept),
            "overlap_share": sum(min(e, r) for _, r, _, e in kept) / both if both else 0.0}


def report_in_flight(out: Path, items: int | None = None, group: int | None = None) -> None:
    """Where the grades in flight were (``in_flight``), with the slots the pass had
    (``items``: the grades it was given, in groups of ``group``): a pass of fewer than two
    jobs per slot cannot keep its slots busy, and its throughput is its start's and tail's,
    not a steady state's."""
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    seconds, held = in_flight(rows)
    if not held:
        return
    from kernelmill.grade import admitted

    slots = sum(admitted._SLOTS_PER_GPU.values())
    top = sorted(held.items(), key=lambda kv: -kv[1])[:12]
    print(f"grades in flight over the phase's steady part ({seconds:.0f} s): "
          f"{sum(held.values()):.1f} on average"
          + (f" (slots: {slots})" if slots else "") + "; by stage: "
          + " ".join(f"{k}={v:.2f}" for k, v in top))
    states = window_states(rows)
    if states:
        print(f"  the GPU's timing windows over that part: held {states['held']:.0%}, asked for "
              f"with none held {states['asked']:.0%}, none held or asked for "
              f"{states['none']:.0%} (grades not yet ready to be timed: where this is large, "
              "the time to reach a window bounds the rate, not the window)")
    share = held_host_share(rows)
    if share:
        wall, cpu = share.pop("total")
        print(f"  the candidate's stages under its window's shared hold, median: {wall:.2f} s "
              f"held, {cpu:.2f} CPU-s ({cpu / wall:.0%} of it host work where one thread "
              "computes); by stage, held/CPU s: " + " ".join(
                  f"{k}={w:.2f}/{c:.2f}" for k, (w, c) in
                  sorted(share.items(), key=lambda kv: -kv[1][0])[:8]))
    inits = windows_beside_inits(rows)
    if inits:
        (beside, wide), (apart, apart_wide) = inits["beside"], inits["apart"]
        print(f"  timing windows while another worker made its CUDA context: {beside}, not "
              f"precise {wide}; the others: {apart}, not precise {apart_wide}")
    latency = before_inputs(rows)
    if latency:
        print(f"  a grade, median s: admission {latency['admission_s']:.2f}, reference "
              f"{latency['reference_s']:.2f}, candidate {latency['candidate_s']:.2f}, of which "
              f"the candidate's worker spent {latency['before_inputs_s']:.2f} before it needed "
              f"its inputs ({latency['overlap_share']:.0%} of the reference and candidate "
              "phases together: what a candidate worker started beside its reference run "
              "could take off each grade)")
        if latency["started_early"]:
            print(f"  candidate workers started beside their reference run: "
                  f"{latency['started_early']} of the grades, waiting "
                  f"{latency['payload_wait_s']:.2f} s for their payloads at the median")
    waves = verdict_waves(rows)
    if waves:
        print(f"  verdicts' ends over that part: {waves['ends']}, gaps median "
              f"{waves['gap_median_s']:.2f} s, longest {waves['gap_max_s']:.2f} s, burstiness "
              f"{waves['burstiness']:+.2f} (0: at random; toward 1: in waves)")
    if slots and items is not None:
        jobs = -(-items // max(1, group or 1))
        if jobs < 2 * slots:
            print(f"  the pass gave its {slots} slots {jobs} "
                  f"{'groups' if (group or 1) > 1 else 'grades'}: fewer than two each, so its "
                  "slots could not all stay busy (more --copies for a steady state)")
