"""What grades were admitted at on the GPU against what NVML read their workers holding, problem
by problem, from kept verdicts (``gpu_check.sh`` keeps them as ``*_verdicts_<PASS>``).

    python scripts/memory_fit.py envab_verdicts.tgz        # or the folder it was made from

For each problem: the estimate a worker was admitted by (``worker_device_gib``: ``PEAK_FACTOR``
times the reference's peak), what that asks with the allocator's factor and the worker's base
(``grade/admitted.py``, the default ``sizes`` mode), what NVML read its candidate workers holding
once their GPU work was done (median / max MiB; the reference's timing worker has mostly ended
by then), what the candidates' allocators held at most (``candidate_allocator_mib``, median MiB,
reserved / allocated: NVML's reading less this is the context and libraries), and the reading
over the ask: under 1 the admission held more than was used (fewer
grades in flight), over 1 it held less (a member may run out of memory beside others and be
graded again alone). The admission waits (median / max s) and how many members were graded again
alone say what each cost. Then, per problem, where its candidates' allocators held what: the
MiB held as each stage began and how much each stage raised the peak (medians over the
candidates; ``candidate_allocator_mib``'s ``stages``).
"""
from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from window_ab import passes  # the same verdict archives

GIB = 1 << 30


def by_problem(rows: list[dict]) -> dict[str, dict]:
    """Per problem: its estimate (GiB a worker), NVML's candidate readings (MiB), the
    admission waits (s) and the members graded again alone."""
    found: dict[str, dict] = defaultdict(lambda: {"estimate": None, "mib": [], "waits": [],
                                                  "reserved": [], "allocated": [],
                                                  "alone": 0, "verdicts": 0,
                                                  "stages": []})
    for row in rows:
        profile = row.get("profile") or {}
        entry = found[row.get("problem_id") or "?"]
        entry["verdicts"] += 1
        if isinstance(profile.get("worker_device_gib"), (int, float)):
            entry["estimate"] = profile["worker_device_gib"]
        mib = (profile.get("device_mib") or {}).get("candidate")
        if type(mib) is int and mib > 0:
            entry["mib"].append(mib)
        for key, value in (profile.get("candidate_allocator_mib") or {}).items():
            if key in ("reserved", "allocated") and type(value) is int:
                entry[key].append(value)
        marks = [mark for mark in (profile.get("candidate_allocator_mib") or {}).get("stages")
                 or [] if isinstance(mark, list) and len(mark) >= 3
                 and isinstance(mark[0], str)
                 and all(isinstance(v, (int, float)) for v in mark[1:])]
        if marks:
            entry["stages"].append(marks)
        if isinstance(profile.get("admission_wait_s"), (int, float)):
            entry["waits"].append(profile["admission_wait_s"])
        entry["alone"] += bool(profile.get("rerun_alone"))
    return dict(found)


def table(found: dict[str, dict], allocator_factor: float, base_gib: float) -> list[str]:
    lines = [(f"{'problem':40s} {'n':>3s} {'est GiB':>8s} {'ask GiB':>8s} "
              f"{'NVML MiB med/max':>17s} {'read/ask':>8s} {'alloc MiB res/al':>17s} "
              f"{'wait s med/max':>15s} {'alone':>5s}")]
    ratios = []
    for name, entry in sorted(found.items()):
        estimate = entry["estimate"]
        ask = None if estimate is None else estimate * allocator_factor + base_gib
        mib = sorted(entry["mib"])
        read = f"{statistics.median(mib):.0f}/{mib[-1]}" if mib else "-"
        ratio = "-"
        if mib and ask:
            ratios.append(mib[-1] / 1024 / ask)
            ratio = f"{ratios[-1]:.2f}"
        held = f"{statistics.median(entry['reserved']):.0f}/" \
            f"{statistics.median(entry['allocated']):.0f}" \
            if entry["reserved"] and entry["allocated"] else "-"
        waits = entry["waits"]
        wait = f"{statistics.median(waits):.1f}/{max(waits):.1f}" if waits else "-"
        lines.append(f"{name[:40]:40s} {entry['verdicts']:3d} "
                     f"{'-' if estimate is None else f'{estimate:.2f}':>8s} "
                     f"{'-' if ask is None else f'{ask:.2f}':>8s} {read:>17s} {ratio:>8s} "
                     f"{held:>17s} {wait:>15s} {entry['alone']:5d}")
    if ratios:
        lines.append(f"most read over ask, by problem: median {statistics.median(ratios):.2f}, "
                     f"least {min(ratios):.2f}, most {max(ratios):.2f}")
    return lines


def stage_rows(found: dict[str, dict]) -> list[str]:
    """Per problem with stage marks: each stage's MiB held as it began, the MiB its allocator
    reserved then (``r``, where the marks give it) and the peak it raised (the next mark's most
    less its own), medians over the candidates, in the stages' order."""
    lines = []
    for name, entry in sorted(found.items()):
        held: dict[str, list[int]] = defaultdict(list)
        raised: dict[str, list[int]] = defaultdict(list)
        reserved: dict[str, list[int]] = defaultdict(list)
        order: list[str] = []
        for marks in entry["stages"]:
            for i, (stage, now, most, *cached) in enumerate(marks):
                if stage not in order:
                    order.append(stage)
                held[stage].append(now)
                reserved[stage] += cached[:1]
                if i + 1 < len(marks):
                    raised[stage].append(marks[i + 1][2] - most)
        if not order:
            continue
        parts = [f"{stage} {statistics.median(held[stage]):.0f}"
                 + (f" r{statistics.median(reserved[stage]):.0f}" if reserved[stage] else "")
                 + (f" (+{statistics.median(raised[stage]):.0f})"
                    if raised[stage] and statistics.median(raised[stage]) >= 1 else "")
                 for stage in order]
        lines.append(f"{name[:40]}: " + ", ".join(parts))
    if lines:
        lines.insert(0, "candidates' allocators, MiB held as each stage began, r: reserved then "
                        "(+ the peak it raised), medians:")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("verdicts", type=Path, help="a folder or .tgz of *_verdicts_<PASS>")
    args = parser.parse_args(argv)
    from kernelmill.grade.admitted import WORKER_BASE_BYTES
    from kernelmill.validate.admission import ALLOCATOR_FACTOR

    rows = [row for kept in passes(args.verdicts).values() for row in kept]
    if not rows:
        print(f"no verdicts under {args.verdicts}", file=sys.stderr)
        return 1
    found = by_problem(rows)
    print("\n".join(table(found, ALLOCATOR_FACTOR, WORKER_BASE_BYTES / GIB) + stage_rows(found)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
