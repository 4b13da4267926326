"""An A/B (or A/B/C) of timing-window settings read from kept verdicts, arm by arm.

    python scripts/window_ab.py window_verdicts.tgz        # or the folder it was made from

``scripts/gpu_check.sh window`` keeps each pass's verdicts as ``window_verdicts_<PASS>`` (N1, B1,
C1, N2...); a pass's arm is its name's letters. For each arm: verdicts, those not certified,
windows (a group's members share one) and their mean, each window part's share of the
windows' time, how the windows' turns settled (``settle_if``), CPU seconds per submission. Then
for each answer: its median speedup over its copies in each pass, and each arm's median against
the base arm's (``--base``, default N: the default window's), the shift, beside the shift
between the base arm's first and last passes (the noise floor), and the spread over copies
((max - min) / median) by arm: median and max over answers and passes, of the speedups and of
each side's times (the windows' own reference times, the candidates'). An arm that moves
speedups more than the base arm's passes move apart, or spreads them wider, changes what is
measured.
"""
from __future__ import annotations

import argparse
import gzip
import json
import re
import statistics
import sys
import tarfile
from collections import Counter, defaultdict
from pathlib import Path

PASS = re.compile(r"_verdicts_([A-Za-z]+)(\d+)")


def passes(path: Path) -> dict[str, list[dict]]:
    """``{pass name: verdict rows}`` from a folder or archive of ``*_verdicts_<PASS>`` folders."""
    found: dict[str, list[dict]] = defaultdict(list)

    def add(name: str, text: str) -> None:
        match = PASS.search(name)
        if match is None:
            return
        for line in text.splitlines():
            if line.strip():
                try:
                    found[match.group(1) + match.group(2)].append(json.loads(line))
                except ValueError:
                    continue  # a line cut by a pass's deadline
    if path.is_dir():
        for child in sorted(path.rglob("*.jsonl*")):
            data = child.read_bytes()
            add(str(child.relative_to(path.parent)),
                (gzip.decompress(data) if child.name.endswith(".gz") else data).decode())
    else:
        with tarfile.open(path) as archive:
            for member in archive:
                if member.isfile() and ".jsonl" in member.name:
                    data = archive.extractfile(member).read()
                    add(member.name, (gzip.decompress(data) if member.name.endswith(".gz")
                                      else data).decode())
    return dict(found)


def arm_of(name: str) -> str:
    return PASS.search(f"_verdicts_{name}").group(1)


def answer_speedups(rows: list[dict]) -> dict[str, list[float]]:
    """Each answer's speedups over its copies (``submission_id`` before its ``#``)."""
    out: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        if row.get("speedup_vs_eager"):
            out[str(row["submission_id"]).split("#")[0]].append(float(row["speedup_vs_eager"]))
    return dict(out)


def answer_times(rows: list[dict], who: str) -> dict[str, list[float]]:
    """Each answer's times over its copies: the candidate's (``who`` "candidate") or the
    reference's own window's (``reference_window_ms`` where the reference's time was pooled,
    ``reference_ms`` otherwise; none where its window did not time it)."""
    out: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        timing = row.get("timing") or {}
        # (a window whose reference took no turn, ``sampled``, has no time of its own: null)
        ms = timing.get("candidate_ms") if who == "candidate" else \
            timing.get("reference_window_ms", timing.get("reference_ms"))
        if isinstance(ms, (int, float)) and ms > 0:
            out[str(row["submission_id"]).split("#")[0]].append(float(ms))
    return dict(out)


def spread_pct(values: list[float]) -> float | None:
    return (max(values) - min(values)) / statistics.median(values) * 100 \
        if len(values) > 1 else None


def arm_summary(rows: list[dict]) -> dict:
    """An arm's verdicts: counts, windows, their parts' shares, settling, CPU per submission."""
    windows, phases, settled, cpu = {}, Counter(), Counter(), []
    untimed = 0  # windows whose reference took no turn (``sampled``: its time the pool's)
    for row in rows:
        profile, timing = row.get("profile") or {}, row.get("timing") or {}
        cpu_s = profile.get("cpu_s") or {}
        if cpu_s and all(isinstance(v, (int, float)) for v in cpu_s.values()):
            cpu.append(sum(cpu_s.values()))
        key = (profile.get("window_ms"), profile.get("exclusive_wait_ms"))
        if not isinstance(key[0], (int, float)) or key in windows:
            continue
        windows[key] = key[0]
        untimed += "reference_window_ms" in timing and timing["reference_window_ms"] is None
        for phase, ms in (profile.get("phases_ms") or {}).items():
            phases[phase] += ms
        settled["unsettled" if timing.get("settled") is False else "settled over"
                if timing.get("settled_over") else "settled"] += 1
        if (timing.get("clocks_held_ms") or 0) > 0:
            settled["clocks held"] += 1
    total = sum(windows.values()) or 1.0
    return {"verdicts": len(rows),
            "not_certified": sum(not (r.get("correct") and not r.get("hacks")) for r in rows),
            "windows": len(windows),
            "window_ms": round(statistics.mean(windows.values()), 1) if windows else None,
            "reference_untimed": untimed,
            "shares": {k: round(v / total, 3) for k, v in phases.items()},
            "settled": dict(settled),
            "cpu_s": round(statistics.median(cpu), 2) if cpu else None}


def compare(by_pass: dict[str, list[dict]], base: str | None = None) -> dict:
    """Arms' summaries, each answer's median speedup per pass, each arm's shift against the
    base arm (``base``; default N, the default window's, else the first by name), the base
    arm's own pass-to-pass shift, and the spread over copies by arm."""
    grouped: dict[str, list[str]] = defaultdict(list)
    for name in sorted(by_pass, key=lambda n: (int(PASS.search(f"_verdicts_{n}").group(2)), n)):
        grouped[arm_of(name)].append(name)
    first = base if base in grouped else "N" if "N" in grouped else min(grouped)
    arms = {first: grouped[first], **{k: v for k, v in sorted(grouped.items()) if k != first}}
    medians = {name: {k: statistics.median(v) for k, v in answer_speedups(rows).items()}
               for name, rows in by_pass.items()}
    spreads = {arm: [s for name in names for v in answer_speedups(by_pass[name]).values()
                     if (s := spread_pct(v)) is not None] for arm, names in arms.items()}
    # which side moved over an answer's copies: its windows' reference time or its own
    sides = {arm: {who: [s for name in names for v in answer_times(by_pass[name], who).values()
                         if (s := spread_pct(v)) is not None]
                   for who in ("reference", "candidate")} for arm, names in arms.items()}

    def arm_median(arm: str, answer: str) -> float | None:
        got = [medians[name][answer] for name in arms[arm] if answer in medians[name]]
        return statistics.median(got) if got else None

    answers = sorted({a for m in medians.values() for a in m})
    shifts: dict[str, list[float]] = defaultdict(list)
    for answer in answers:
        base = arm_median(first, answer)
        for arm in arms:
            got = arm_median(arm, answer)
            if arm != first and base and got:
                shifts[arm].append((got / base - 1) * 100)
        own = [medians[name][answer] for name in arms[first] if answer in medians[name]]
        if len(own) > 1:
            shifts[f"{first} passes"].append((own[-1] / own[0] - 1) * 100)
    return {"arms": {arm: {"passes": names,
                           **arm_summary([r for n in names for r in by_pass[n]]),
                           "spread_median_pct": round(statistics.median(spreads[arm]), 2)
                           if spreads[arm] else None,
                           "spread_max_pct": round(max(spreads[arm]), 2)
                           if spreads[arm] else None,
                           "time_spread_pct": {
                               who: {"median": round(statistics.median(v), 2),
                                     "max": round(max(v), 2)}
                               for who, v in sides[arm].items() if v}}
                    for arm, names in arms.items()},
            "answers": {a: {name: round(medians[name][a], 4) for name in medians
                            if a in medians[name]} for a in answers},
            # |shift| over the answers: the median and the largest, in percent
            "shift_pct": {k: {"median_abs": round(statistics.median(abs(x) for x in v), 2),
                              "max_abs": round(max(abs(x) for x in v), 2)}
                          for k, v in shifts.items() if v}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("verdicts", type=Path, help="window_verdicts.tgz or its folder")
    parser.add_argument("--base", help="the arm the others are read against (default N)")
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON")
    args = parser.parse_args(argv)
    if not args.verdicts.exists():
        print(f"{args.verdicts}: no such file or folder", file=sys.stderr)
        return 2
    try:
        by_pass = passes(args.verdicts)
    except (tarfile.TarError, OSError) as exc:
        print(f"{args.verdicts}: not a folder or archive of verdicts ({exc})", file=sys.stderr)
        return 2
    if not by_pass:
        print(f"{args.verdicts}: no *_verdicts_<PASS> verdicts found", file=sys.stderr)
        return 2
    result = compare(by_pass, args.base)
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    for arm, info in result["arms"].items():
        print(f"arm {arm} ({' '.join(info['passes'])}): {info['verdicts']} verdicts, "
              f"{info['not_certified']} not certified; {info['windows']} windows, "
              f"{info['window_ms']} ms mean ({info['reference_untimed']} without the "
              f"reference's turns); CPU {info['cpu_s']} s per submission; spread over "
              f"copies median {info['spread_median_pct']}%, max {info['spread_max_pct']}%")
        moved = info.get("time_spread_pct") or {}
        if moved:  # which side moved over the copies: the windows' reference or the candidate
            print("   times over copies: " + "; ".join(
                f"{who} median {v['median']}%, max {v['max']}%" for who, v in moved.items()))
        print("   window parts: " + " ".join(f"{k}={v:.0%}" for k, v in info["shares"].items())
              + "; settling: " + " ".join(f"{k}={v}" for k, v in info["settled"].items()))
    for arm, shift in result["shift_pct"].items():
        print(f"speedup shift {arm}: |median| {shift['median_abs']}%, |max| {shift['max_abs']}%")
    columns = sorted({n for row in result["answers"].values() for n in row},
                     key=lambda n: (arm_of(n), n))
    print("answer".ljust(36) + "".join(f"{n:>10}" for n in columns))
    for answer, row in result["answers"].items():
        print(answer[:36].ljust(36) + "".join(f"{row[n]:>10.4f}" if n in row else " " * 10
                                             for n in columns))
    return 0


if __name__ == "__main__":
    sys.exit(main())
