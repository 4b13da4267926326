"""What the grading benchmark reads from a pass's verdicts (``grade_throughput.py``): the
summary row (``summarize``), honest answers not certified, per-problem lines, grades in flight
and the timing windows' states over the steady part, the candidate's shared holds, the verdicts'
waves, the slowest and median grade whole, and the speedup spread over copies."""
from __future__ import annotations

import itertools
import json
import statistics
from collections import Counter
from pathlib import Path


def spare_trials(profile: dict) -> tuple[int, float] | None:
    """A window's unseen check (one member's profile): the spare trials it timed past its
    required ones, and their steps' milliseconds (each asked for, loaded, its output looked
    at, and the calls after it); None where the profile does not say."""
    calls, steps = profile.get("unseen_calls_ms") or {}, profile.get("unseen_steps_ms") or {}
    required, timed = calls.get("required"), calls.get("unseen")
    if type(required) is not int or not isinstance(timed, list):
        return None
    extra = max(0, len(timed) - required)
    ms = sum(sum(steps.get(step, [])[required:required + extra])
             for step in ("late", "load", "observe"))
    after = steps.get("after") or []  # one entry per trial: the calls after it together
    return extra, ms + sum(after[required:required + extra])


def trigger_ratio(profile: dict) -> float | None:
    """A window's unseen check (one member's profile): its first call on new inputs against
    its fastest on the timed inputs before, as the spares' trigger read them (the check's own
    clock: ``window_worker.reads_slow``); None where the profile does not say."""
    calls = profile.get("unseen_calls_ms") or {}
    seen, new = calls.get("seen"), calls.get("unseen")
    if not isinstance(seen, list) or not isinstance(new, list) or not seen or not new or \
            not all(type(v) in (int, float) and v > 0 for v in [*seen, new[0]]):
        return None
    return new[0] / min(seen)


def summarize(out: Path) -> dict:
    counts: Counter = Counter()
    reference_s, candidate_s, warm = [], [], 0
    waits: dict[str, list[float]] = {"shared_wait_ms": [], "exclusive_wait_ms": [],
                                     "exclusive_queue_ms": [], "exclusive_drain_ms": [],
                                     "window_ms": [], "exclusive_held_ms": [],
                                     "exclusive_setup_ms": []}
    aside: list[float] = []  # each grade's seconds with its workers stopped for other windows
    stages: dict[str, list[float]] = {}
    ref_stages: dict[str, list[float]] = {}
    stage_cpu: dict[str, list[float]] = {}  # the candidate worker's CPU seconds by stage
    ref_stage_cpu: dict[str, list[float]] = {}
    phases: dict[str, list[float]] = {}
    turn: dict[str, list[float]] = {}
    rounds: list[float] = []
    admission: list[float] = []
    reruns_alone = 0  # members graded again alone after running out of memory beside others
    # each worker's device memory as NVML read it (MiB, by who), and what a worker was
    # admitted at before the allocator's factor and its base (``admitted._admitted``)
    device_mib: dict[str, list[float]] = {}
    admitted_gib: list[float] = []
    windows: set = set()
    warm_by: Counter = Counter()  # windows by their first participant's warm-up
    settled_by: Counter = Counter()  # windows by how their turns settled (``settle_if``)
    sm_share: list[float] = []  # NVML's SM clock at a window's start, of its highest
    witness: dict[str, list[float]] = {}  # reading the candidate's witness (``Witness.cost``)
    phased_ms: list[float] = []  # the milliseconds of the windows that report their parts
    reference_stretch: list[float] = []  # each reference run's longest between its points
    # each candidate's longest stretch between its points, and the stage most of it was in
    candidate_stretch: list[float] = []
    stretch_stage: Counter = Counter()
    compile_aside: list[float] = []  # each stepping candidate's compiles' seconds aside
    # each grade's unseen check: spare trials timed (past its required ones), and their
    # steps' milliseconds (asked for, loaded, output looked at, the calls after)
    spares: list[tuple[int, float]] = []
    for line in out.read_text().splitlines():
        row = json.loads(line)
        counts["correct" if row["correct"] else "hacked" if row["hacks"] else
               "error" if row.get("error") else "incorrect"] += 1
        profile = row.get("profile") or {}
        for stage, seconds in (profile.get("stages_s") or {}).items():
            stages.setdefault(stage, []).append(seconds)
        for stage, seconds in (profile.get("reference_stages_s") or {}).items():
            ref_stages.setdefault(stage, []).append(seconds)
        for key, into in (("stages_cpu_s", stage_cpu), ("reference_stages_cpu_s", ref_stage_cpu)):
            for stage, seconds in (profile.get(key) or {}).items():
                into.setdefault(stage, []).append(seconds)
        if profile.get("admission_wait_s") is not None:
            admission.append(profile["admission_wait_s"])
        reruns_alone += bool(profile.get("rerun_alone"))
        for who, mib in (profile.get("device_mib") or {}).items():
            if isinstance(mib, (int, float)):
                device_mib.setdefault(who, []).append(mib)
        if isinstance(profile.get("worker_device_gib"), (int, float)):
            admitted_gib.append(profile["worker_device_gib"])
        for key, value in (profile.get("witness") or {}).items():
            if isinstance(value, (int, float)):
                witness.setdefault(key, []).append(value)
        if isinstance((profile.get("stepped_aside") or {}).get("s"), (int, float)):
            aside.append(profile["stepped_aside"]["s"])
        longest = profile.get("longest_stretch_by_stage") or {}
        if longest:
            candidate_stretch.append(sum(longest.values()))
            stretch_stage[max(longest, key=longest.get)] += 1
        if isinstance(profile.get("reference_stretch_s"), (int, float)):
            reference_stretch.append(profile["reference_stretch_s"])
        if isinstance((profile.get("compile_aside") or {}).get("s"), (int, float)):
            compile_aside.append(profile["compile_aside"]["s"])
        if "reference_s" in profile:
            reference_s.append(profile["reference_s"])
            candidate_s.append(profile["candidate_s"])
            warm += bool(profile.get("warm"))
        taken = spare_trials(profile)  # each member's own check, a group's too
        if taken is not None:
            spares.append(taken)
        window = tuple(profile.get(k) for k in ("window_ms", "exclusive_wait_ms"))
        if window in windows:  # a group's members share one window: count it once
            continue
        windows.add(window)
        for phase, ms in (profile.get("phases_ms") or {}).items():
            phases.setdefault(phase, []).append(ms)
        if profile.get("phases_ms") and isinstance(profile.get("window_ms"), (int, float)):
            phased_ms.append(profile["window_ms"])  # the windows whose parts are known
        timing = row.get("timing") or {}
        if profile.get("phases_ms"):  # how its first participant warmed (``window_rounds``)
            warm_by[("hot" if timing.get("clocks_hot_s") is not None else "clocks up"
                     if timing.get("clocks_up") else "full")] += 1
            settled_by[("unsettled" if timing.get("settled") is False else "settled over"
                        if timing.get("settled_over") else "settled")] += 1
            if (timing.get("clocks_held_ms") or 0) > 0:  # the power or thermal policy held
                settled_by["clocks held"] += 1
        clocks = profile.get("clocks") or {}
        if isinstance(clocks.get("sm_mhz"), int) and clocks.get("max_sm_mhz"):
            sm_share.append(clocks["sm_mhz"] / clocks["max_sm_mhz"])
        for part, ms in (profile.get("turn_ms") or {}).items():
            turn.setdefault(part, []).append(ms)
        if profile.get("rounds") is not None:
            rounds.append(profile["rounds"])
        for key, values in waits.items():
            if profile.get(key) is not None:
                values.append(profile[key])
    median = lambda v: round(statistics.median(v), 2) if v else None
    speedups: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    for line in out.read_text().splitlines():
        row = json.loads(line)
        for worker, seconds in ((row.get("profile") or {}).get("cpu_s") or {}).items():
            if isinstance(seconds, (int, float)):
                cpu.setdefault(worker, []).append(seconds)
        if row.get("speedup_vs_eager"):
            speedups.setdefault(row["submission_id"].split("#")[0], []).append(
                row["speedup_vs_eager"])
    return {**counts,
            # each answer's median speedup over its copies: what 8 slots report against 1
            "median_speedup": {k: round(statistics.median(v), 4) for k, v in speedups.items()},
            # CPU seconds per submission, by worker (its share of a shared one), medians
            "worker_cpu_s": {k: median(v) for k, v in cpu.items()},
            "reference_s": median(reference_s), "candidate_s": median(candidate_s),
            "warm": f"{warm}/{len(reference_s)}",
            **{f"median_{k}": median(v) for k, v in waits.items()},
            "window_s_total": round(sum(waits["window_ms"]) / 1e3, 1),
            # the GPU held alone: each window's whole exclusive hold where known
            "held_s_total": round(sum(waits["exclusive_held_ms"]) / 1e3, 1),
            "median_stepped_aside_s": median(aside),
            # the windows that waited for shared work to step aside or end, and that wait in
            # all (the median is mostly 0: most windows find none holding the GPU)
            "windows_drained": sum(1 for ms in waits["exclusive_drain_ms"] if ms > 0),
            "drain_s_total": round(sum(waits["exclusive_drain_ms"]) / 1e3, 1),
            "reference_stretch_s": [median(reference_stretch), round(max(reference_stretch), 2)]
            if reference_stretch else None,
            "candidate_stretch_s": [median(candidate_stretch), round(max(candidate_stretch), 2)]
            if candidate_stretch else None,
            "candidate_stretch_stages": dict(stretch_stage.most_common()),
            # candidates whose compiles stepped aside (``KERNELMILL_COMPILE_ASIDE``), and
            # their seconds aside at the median and in all
            "compile_aside": [len(compile_aside), median(compile_aside),
                              round(sum(compile_aside), 1)] if compile_aside else None,
            "windows": len(waits["window_ms"]),
            # unseen checks that timed spare trials, and those spares' seconds in all
            "checks_with_spares": sum(1 for n, _ms in spares if n > 0),
            "unseen_checks": len(spares),
            "spare_s_total": round(sum(ms for _n, ms in spares) / 1e3, 2),
            "candidate_stages_s": {k: median(v) for k, v in stages.items()},
            "reference_stages_s": {k: median(v) for k, v in ref_stages.items()},
            "candidate_stages_cpu_s": {k: median(v) for k, v in stage_cpu.items()},
            "reference_stages_cpu_s": {k: median(v) for k, v in ref_stage_cpu.items()},
            "window_phases_ms": {k: median(v) for k, v in phases.items()},
            # each part's share of all the windows' time (a part only some windows have, a
            # graph captured again, counts as what it cost the GPU over all of them)
            "window_phase_share": phase_shares(phases, phased_ms),
            "witness": {k: median(v) for k, v in witness.items()},
            # windows that captured a member's graph again (``window_rounds``: its phase
            # ``resize``, the median above over those alone)
            "windows_resized": len(phases.get("resize") or []),
            "turn_ms": {k: median(v) for k, v in turn.items()},
            "median_rounds": median(rounds),
            "warm_by": dict(warm_by),
            "settled_by": dict(settled_by),
            "sm_clock_share": [round(min(sm_share), 3), round(max(sm_share), 3)]
            if sm_share else None,
            "median_admission_wait_s": median(admission),
            "max_admission_wait_s": max(admission) if admission else None,
            "reruns_alone": reruns_alone,
            "device_mib": {who: [median(v), max(v)] for who, v in device_mib.items()},
            "admitted_gib": [median(admitted_gib), max(admitted_gib)] if admitted_gib else None}


def phase_shares(phases: dict[str, list[float]], windows_ms: list[float]) -> dict[str, float]:
    """Each window part's milliseconds summed over the windows, as a share of all the windows'
    milliseconds (the GPU time a window holds it alone, part by part); the rest of the windows'
    time as ``other``."""
    total = sum(windows_ms)
    if not total:
        return {}
    shares = {k: round(sum(v) / total, 3) for k, v in
              sorted(phases.items(), key=lambda kv: -sum(kv[1]))}
    shares["other"] = round(1 - sum(shares.values()), 3)  # below 0: parts overlap the window
    return shares


def report_uncertified(out: Path) -> None:
    """The speedup range, and every honest answer (not a hack_/crash_/bad_ fixture) that was
    not certified, with why."""
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    speed = [r["speedup_vs_eager"] for r in rows if r.get("speedup_vs_eager")]
    if speed:
        print(f"speedup vs eager over correct kernels: min {min(speed):.2f}  "
              f"max {max(speed):.2f}")
    for r in rows:
        honest = not r["submission_id"].startswith(("hack_", "crash_", "bad_"))
        if honest and not (r["correct"] and not r["hacks"]):
            print(f"  NOT CERTIFIED {r['submission_id']}: {r['hacks']} "
                  f"{str(r.get('hack_details') or '')[:200]} "
                  f"{(r.get('error') or {}).get('message', '')[:160]}")
            for name, check in (r.get("checks") or {}).items():  # the evidence, for a fix
                if check.get("passed") is False or name.startswith("unseen_time"):
                    print(f"      {name}: {str(check.get('detail'))[:300]}")



def report_per_problem(out: Path) -> None:
    """Where a phase's time went, one line per problem: its submissions, the longest wall time
    of one (a group's members end together), its window, the median reference and candidate run
    seconds and the candidate run's three longest stages."""
    rows: dict[str, list[dict]] = {}
    for line in out.read_text().splitlines():
        row = json.loads(line)
        rows.setdefault(row.get("problem_id") or row["submission_id"].split("#")[0], []).append(row)
    print(f"{'problem':24} {'subs':>4} {'wall s':>7} {'window ms':>10} {'rounds':>6} "
          f"{'turn+ms':>7} "
          f"{'warm/resize/rounds/clock/unseen/witness ms':>43} {'ref s':>6} "
          f"{'cand s':>7}  longest candidate stages (median s)")
    for problem, group in sorted(rows.items()):
        profiles = [r.get("profile") or {} for r in group]
        walls = [r["wall_s"] for r in group if r.get("wall_s") is not None]
        med = lambda key: statistics.median(v) if (v := [p[key] for p in profiles  # noqa: E731
                                                          if p.get(key) is not None]) else None
        stages: dict[str, list[float]] = {}
        for profile in profiles:
            for stage, seconds in (profile.get("stages_s") or {}).items():
                stages.setdefault(stage, []).append(seconds)
        longest = sorted(((statistics.median(v), k) for k, v in stages.items()), reverse=True)[:3]
        fmt = lambda v, spec: "-" if v is None else format(v, spec)  # noqa: E731
        phases = [statistics.median(v) if (v := [p["phases_ms"][k] for p in profiles
                                                 if k in (p.get("phases_ms") or {})]) else None
                  for k in ("warm", "resize", "rounds", "clock", "unseen", "witness")]
        print(f"{problem[:24]:24} {len(group):>4} {fmt(max(walls) if walls else None, '.1f'):>7} "
              f"{fmt(med('window_ms'), '.0f'):>10} {fmt(med('rounds'), '.0f'):>6} "
              f"{fmt(med('turn_overhead_ms'), '.1f'):>7} "
              f"{'/'.join(fmt(v, '.0f') for v in phases):>43} {fmt(med('reference_s'), '.1f'):>6} "
              f"{fmt(med('candidate_s'), '.1f'):>7}  "
              + " ".join(f"{k}={v:.2f}" for v, k in longest))
        unseen_line = _unseen_share_line(profiles, phases[4], med("window_ms"))
        if unseen_line:
            print(unseen_line)


UNSEEN_SHARE = 0.25  # a problem whose unseen check holds this share of its window or more


def _unseen_share_line(profiles: list[dict], unseen_ms: float | None,
                       window_ms: float | None) -> str | None:
    """For a problem whose unseen check held ``UNSEEN_SHARE`` of its window or more (a group's
    window: every member's check): where each member's check went, median ms of each step
    over its trials together, how many checks timed spare trials, and what their trigger read
    (``trigger_ratio``, with how many checks' replays were gated); else None."""
    if not unseen_ms or not window_ms or unseen_ms < UNSEEN_SHARE * window_ms:
        return None
    steps = unseen_step_medians(profiles)
    spared = [taken[0] > 0 for p in profiles if (taken := spare_trials(p)) is not None]
    ratios = [r for p in profiles if (r := trigger_ratio(p)) is not None]
    gated = [(p.get("unseen_calls_ms") or {}).get("gated") is True for p in profiles
             if isinstance((p.get("unseen_calls_ms") or {}).get("gated"), bool)]
    read = f"; new inputs read {min(ratios):.3f}-{max(ratios):.3f}x the timed ones" \
        if ratios else ""
    return (f"    unseen check {unseen_ms / window_ms:.0%} of the window; a member's steps, "
            "median ms: " + " ".join(f"{k}={v:.0f}" for k, v in steps.items()) +
            (f"; spares taken in {sum(spared)} of {len(spared)} checks" if spared else "") +
            read + (f" (gated in {sum(gated)} of {len(gated)})" if gated else ""))


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


def report_slowest_and_median(out: Path) -> None:
    """One grade whole: the slowest submission's and the median one's (by wall time) reference
    and candidate runs, every stage of the candidate's worker, the window's parts and the CPU
    seconds of each worker."""
    rows = sorted((json.loads(line) for line in out.read_text().splitlines()),
                  key=lambda r: r.get("wall_s") or 0.0)
    rows = [r for r in rows if r.get("wall_s") is not None]
    if not rows:
        return
    for label, row in (("slowest", rows[-1]), ("median", rows[len(rows) // 2])):
        profile = row.get("profile") or {}
        stages = " ".join(f"{k}={v:.2f}" for k, v in (profile.get("stages_s") or {}).items())
        cpu = " ".join(f"{k}={v}" for k, v in (profile.get("cpu_s") or {}).items())
        ref_stages = " ".join(f"{k}={v:.2f}" for k, v in
                              (profile.get("reference_stages_s") or {}).items())
        stage_cpu = " ".join(f"{k}={v:.2f}" for k, v in
                             (profile.get("stages_cpu_s") or {}).items())
        print(f"{label} {row['submission_id']}: wall {row['wall_s']:.1f} s, reference "
              f"{profile.get('reference_s')} s, candidate {profile.get('candidate_s')} s, "
              f"window {profile.get('window_ms')} ms {profile.get('phases_ms')}, waits shared "
              f"{profile.get('shared_wait_ms')} / exclusive {profile.get('exclusive_wait_ms')} ms"
              f", GPU memory admission {profile.get('admission_wait_s')} s "
              f"({profile.get('worker_device_gib')} GiB per worker)"
              f"\n    candidate stages (s): {stages}\n    reference stages (s): {ref_stages}"
              f"\n    CPU s: {cpu}\n    candidate CPU s by stage: {stage_cpu}"
              f"\n    unseen check (ms per hidden trial): parent's hand-overs "
              f"{profile.get('late_write_ms')}, worker's {profile.get('unseen_steps_ms')}")
    steps = unseen_step_medians([row.get("profile") or {} for row in rows], hand_over=True)
    if steps:
        print("unseen check, median ms per grade (its hidden trials together): " +
              " ".join(f"{k}={v:.1f}" for k, v in steps.items()) +
              " (late: the worker's wait for its part, the parent's hand-over included)")


def unseen_step_medians(profiles: list[dict], hand_over: bool = False) -> dict[str, float]:
    """Each step of the grades' unseen checks (``unseen_steps_ms``; with ``hand_over`` also the
    parent's hand-overs of the parts, ``late_write_ms``), summed over a grade's hidden trials,
    then the median over the grades that took that step."""
    steps: dict[str, list[float]] = {}
    for profile in profiles:
        named = dict(profile.get("unseen_steps_ms") or {})
        if hand_over:
            named["parent hand-over"] = profile.get("late_write_ms") or []
        for name, values in named.items():
            if values:
                steps.setdefault(name, []).append(sum(values))
    return {name: statistics.median(values) for name, values in steps.items()}


def report_spread(out: Path) -> None:
    """With ``--copies``: each answer's speedup spread ``(max - min) / median`` over its copies,
    graded concurrently (the slots share the GPU; the timing windows do not)."""
    speedups: dict[str, list[float]] = {}
    timings: dict[str, list[dict]] = {}
    for line in out.read_text().splitlines():
        row = json.loads(line)
        if row.get("speedup_vs_eager"):
            answer = row["submission_id"].split("#")[0]
            speedups.setdefault(answer, []).append(row["speedup_vs_eager"])
            timings.setdefault(answer, []).append(row.get("timing") or {})
    spreads = {k: (max(v) - min(v)) / statistics.median(v) * 100
               for k, v in speedups.items() if len(v) > 1}
    timed = [t for v in timings.values() for t in v]
    wide = [k for k, v in timings.items() for t in v if t.get("precise") is False]
    if timed:  # timings whose interval stayed wider than the window's limit
        print(f"timings not precise: {len(wide)} of {len(timed)}"
              + (f" ({', '.join(sorted(set(wide)))})" if wide else ""))
    if spreads:
        worst = max(spreads, key=spreads.get)
        print(f"speedup spread over copies: median {statistics.median(spreads.values()):.2f}%  "
              f"max {spreads[worst]:.2f}% ({worst})  "
              + " ".join(f"{k}={v:.1f}" for k, v in sorted(spreads.items())))
        # which side moved: the reference's time (its window's own, where it was pooled) or
        # the candidate's, each as (max - min) / median over an answer's copies
        for label, key in (("reference", "reference_ms"),
                           ("reference's own windows", "reference_window_ms"),
                           ("candidate", "candidate_ms")):
            moved = {k: _spread([t.get(key) for t in v]) for k, v in timings.items()}
            moved = {k: v for k, v in moved.items() if v is not None}
            if moved:
                most = max(moved, key=moved.get)
                print(f"  {label} ms spread: median {statistics.median(moved.values()):.2f}%  "
                      f"max {moved[most]:.2f}% ({most})")
        print(f"{worst}'s copies (reference ms, its window's own, windows pooled, candidate ms, "
              "reps, CI %):")
        for timing in timings[worst]:
            print("  " + "  ".join(str(timing.get(k)) for k in
                                   ("reference_ms", "reference_window_ms", "reference_windows",
                                    "candidate_ms", "reps", "ci_pct")))


def _spread(values: list) -> float | None:
    """(max - min) / median of the numbers among ``values``, in %; None under two."""
    numbers = [v for v in values if type(v) in (int, float) and v > 0]
    if len(numbers) < 2:
        return None
    return (max(numbers) - min(numbers)) / statistics.median(numbers) * 100
