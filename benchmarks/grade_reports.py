"""What the grading benchmark reads from a pass's verdicts (``grade_throughput.py``): the
summary row (``summarize``), honest answers not certified, per-problem lines, the slowest and
median grade whole, and the speedup spread over copies. Where the grades were over time is
``grade_timeline``'s."""
from __future__ import annotations

import json
import re
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
    admission_by: dict[str, list[float]] = {}  # the waits for the host's budget, the GPU's
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
        for budget, waited in (profile.get("admission_waits_s") or {}).items():
            if isinstance(waited, (int, float)):
                admission_by.setdefault(budget, []).append(waited)
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
            # per budget (host, device): the median and max wait, and the members' seconds in
            # all (a group's one wait counted once per member)
            "admission_waits_s": {k: [median(v), round(max(v), 2), round(sum(v), 1)]
                                  for k, v in admission_by.items()},
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
        reference_line = _reference_line(profiles)
        if reference_line:
            print(reference_line)
        one_call_line = _one_call_line(problem, group)
        if one_call_line:
            print(one_call_line)
        resize_line = _resize_line(problem, profiles)
        if resize_line:
            print(resize_line)


def _resize_line(problem: str, profiles: list[dict]) -> str | None:
    """Where a problem's timing graphs were captured again in the window (``phases_ms.
    resize``): how many windows, and each participant's calls per sample as prepared and as
    the window took them, with how often (a spare graph, ``spare_graph``, holds twice the
    prepared count); None where no window did."""
    resized = [p for p in profiles if "resize" in (p.get("phases_ms") or {})]
    if not resized:
        return None
    counts: Counter = Counter()
    for profile in resized:
        prepared = profile.get("prepared_calls") or {}
        window = profile.get("calls_per_sample") or {}
        for who in ("reference", "candidate"):
            if prepared.get(who) is not None:
                counts[f"{who} {prepared[who]}->{window.get(who)}"] += 1
    said = ", ".join(f"{k} ({n})" for k, n in sorted(counts.items())) or "counts not recorded"
    return (f"    captured again in the window ({problem}): {len(resized)} of {len(profiles)}, "
            f"{statistics.median(p['phases_ms']['resize'] for p in resized):.0f} ms at the "
            f"median; calls prepared->window: {said}")


# the scored bound's detail (``checks.device_work.scored_device_work``): the scored call and the
# one-call check's call it was held to, and whether that was the warm check's
ONE_CALL_DETAIL = re.compile(r"scored ([0-9.e+-]+) µs per call, the one-call graph's call "
                             r"([0-9.e+-]+) µs")


def _one_call_line(problem: str, group: list[dict]) -> str | None:
    """A problem's scored calls over the one-call check's call they were held to
    (``scored_vs_one_call_us``: flagged under 0.75, less its 1 µs floor): the least and the
    median over its members, how many read the warm check (``single_warm``) and how many the
    bound flagged; None where no member had the check."""
    ratios, warm, flagged = [], 0, 0
    for row in group:
        check = (row.get("checks") or {}).get("scored_vs_one_call_us")
        found = ONE_CALL_DETAIL.search(str((check or {}).get("detail") or ""))
        if not found or not float(found.group(2)):
            continue
        ratios.append(float(found.group(1)) / float(found.group(2)))
        warm += "read into the L2 cache" in check["detail"]
        flagged += check.get("passed") is False
    if not ratios:
        return None
    return (f"    scored over the one-call check ({problem}): least {min(ratios):.2f}, median "
            f"{statistics.median(ratios):.2f} of {len(ratios)} (the warm check read in {warm}, "
            f"flagged in {flagged})")


def _reference_line(profiles: list[dict]) -> str | None:
    """For a problem graded in groups: the members its reference runs served
    (``reference_shared_by``, median), the reference's CPU per member and the waits for the
    host's and the GPU's memory (medians, seconds): what sharing a group's run changes."""
    shared = [p["reference_shared_by"] for p in profiles
              if isinstance(p.get("reference_shared_by"), int)]
    if not any((p.get("group") or 1) > 1 for p in profiles) or not shared:
        return None

    def median(values: list) -> str:
        values = [v for v in values if isinstance(v, (int, float))]
        return f"{statistics.median(values):.2f}" if values else "-"

    waits = [p.get("admission_waits_s") or {} for p in profiles]
    return (f"    reference runs: {statistics.median(shared):g} members a run, CPU "
            f"{median([(p.get('cpu_s') or {}).get('reference') for p in profiles])} s a member; "
            f"memory waits: host {median([w.get('host') for w in waits])} s, device "
            f"{median([w.get('device') for w in waits])} s")


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
