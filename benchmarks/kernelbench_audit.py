"""Audit a KernelBench checkout with the validator: which problems fail which check, and why.

Imports ``PATH/level1`` .. ``level3`` (``kernelmill.core.interop.import_folder``), validates every
problem (``kernelmill.validate.runner.validate_file``; resumable: rerunning with the same
``--out`` skips what is done), then prints per level how many problems failed each check, every
failure as one line ``level  problem  check  why``, the memory admission's work (too large,
rerun alone, waited) and the wall time with problems per hour.

    python benchmarks/kernelbench_audit.py shared/benchmarks/kernelbench --device cuda \\
        [--levels 1 2 3] [--limit N] [--out audit.jsonl] [--workers N] [--set timing_ci_pct=2]

Compare with the published audits: METR removed 45 of 270 tasks; robust-kbench's numeric
filters flag 9/100 of level 1 and 17/100 of level 2.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path


def make_input(root: Path, levels: list[int], limit: int | None, path: Path,
               match: str | None = None) -> dict[int, int]:
    """One JSONL of the chosen levels' problems (those whose file name ``match`` finds, the
    first ``limit`` of each level, by file name)."""
    from kernelmill.core.interop import import_folder

    counts: dict[int, int] = {}
    with path.open("w") as out:
        for level in levels:
            folder = root / f"level{level}"
            if not folder.is_dir():
                print(f"{folder}: missing, skipped", file=sys.stderr)
                continue
            part = path.with_suffix(f".level{level}.jsonl")
            part.unlink(missing_ok=True)
            result = import_folder(folder, part, generator="kernelbench")
            for line in result.malformed:
                print(f"level {level}: malformed: {line}", file=sys.stderr)
            lines = [line for line in part.read_text().splitlines()
                     if not match or re.search(match, _problem(json.loads(line)))]
            lines = lines[:limit] if limit else lines
            for line in lines:
                record = json.loads(line)
                record["level"] = level
                out.write(json.dumps(record) + "\n")
            counts[level] = len(lines)
            part.unlink()
    return counts


def _problem(record: dict) -> str:
    """The KernelBench file name (``11_4D_tensor_matrix_multiplication``), else the name."""
    origin = (record.get("provenance") or {}).get("origin")
    return Path(origin).stem if origin else str(record.get("name"))


def summarize(records: list[dict], levels: list[int]) -> tuple[str, list[str], dict]:
    """(table of failures per level and check, one line per failure, totals)."""
    per_level: dict[int, Counter] = defaultdict(Counter)
    totals: dict[int, Counter] = defaultdict(Counter)
    lines = []
    memory = Counter()
    ratios: list[tuple[float, str]] = []  # measured peak / estimate, per problem (CUDA)
    live: list[float] = []  # the probe's live-tensor peak / its estimate (CUDA)
    replay_live: list[float] = []  # the replay's live-tensor peak / its estimate (CUDA)
    reserved: list[float] = []  # either worker's allocator peak / its live-tensor peak
    for r in sorted(records, key=lambda r: (r.get("level") or 0, _problem(r))):
        v = r.get("validation") or {}
        level = r.get("level") or 0
        totals[level]["problems"] += 1
        totals[level]["passed"] += bool(v.get("passed"))
        mem = v.get("memory") or {}
        memory["estimated"] += mem.get("method") == "meta"
        memory["estimate unknown"] += mem.get("method") == "unknown"
        # either worker: the probe or the replay
        for retry in ("larger", "alone"):
            key = f"retried_{retry}"
            memory[f"rerun {retry}"] += bool(mem.get(key) or (mem.get("replay") or {}).get(key))
        memory["waited_s"] += mem.get("waited_s") or 0
        memory["too_large"] += "too_large" in (v.get("flags") or [])
        if mem.get("measured_bytes") and mem.get("estimate_bytes"):
            ratios.append((mem["measured_bytes"] / mem["estimate_bytes"], _problem(r)))
        if mem.get("measured_allocated_bytes") and mem.get("estimate_bytes"):
            live.append(mem["measured_allocated_bytes"] / mem["estimate_bytes"])
        replay = mem.get("replay") or {}
        if replay.get("measured_allocated_bytes") and mem.get("replay_bytes"):
            replay_live.append(replay["measured_allocated_bytes"] / mem["replay_bytes"])
        for worker in (mem, replay):
            if worker.get("measured_bytes") and worker.get("measured_allocated_bytes"):
                reserved.append(worker["measured_bytes"] / worker["measured_allocated_bytes"])
        for name, check in (v.get("checks") or {}).items():
            if check.get("passed") is False:
                per_level[level][name] += 1
                why = " ".join(str(check.get("detail", "")).split())[:240]
                lines.append(f"L{level}  {_problem(r)}  {name}  {why}")
    checks = sorted({c for counter in per_level.values() for c in counter})
    head = f"{'check':24}" + "".join(f"{'L' + str(lv):>8}" for lv in levels)
    rows = [head, "-" * len(head)]
    rows.append(f"{'problems':24}" + "".join(f"{totals[lv]['problems']:>8}" for lv in levels))
    rows.append(f"{'passed':24}" + "".join(f"{totals[lv]['passed']:>8}" for lv in levels))
    for c in checks:
        rows.append(f"{c:24}" + "".join(f"{per_level[lv][c]:>8}" for lv in levels))
    if ratios:
        ratios.sort()
        memory["measured/estimate min"] = round(ratios[0][0], 3)
        memory["measured/estimate median"] = round(ratios[len(ratios) // 2][0], 3)
        memory["measured/estimate max"] = round(ratios[-1][0], 3)
        memory["underestimated"] = sum(x > 1 for x, _ in ratios)
        memory["most underestimated"] = ratios[-1][1]
    if live:
        live.sort()
        memory["live/estimate median"] = round(live[len(live) // 2], 3)
        memory["live/estimate max"] = round(live[-1], 3)
        memory["live over estimate"] = sum(x > 1 for x in live)
    if replay_live:
        replay_live.sort()
        memory["replay live/estimate median"] = round(replay_live[len(replay_live) // 2], 3)
        memory["replay live/estimate max"] = round(replay_live[-1], 3)
        memory["replay live over estimate"] = sum(x > 1 for x in replay_live)
    if reserved:
        reserved.sort()
        memory["reserved/live median"] = round(reserved[len(reserved) // 2], 3)
        memory["reserved/live max"] = round(reserved[-1], 3)
    return "\n".join(rows), lines, {"memory": dict(memory),
                                     "per_level": {lv: dict(per_level[lv]) for lv in levels},
                                     "totals": {lv: dict(totals[lv]) for lv in levels}}


def _interrupt(*_args) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", type=Path, help="a KernelBench checkout (holding level1/ ...)")
    ap.add_argument("--levels", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--limit", type=int, default=None, help="first N problems of each level")
    ap.add_argument("--match", default=None,
                    help="only problems whose file name this regular expression finds")
    ap.add_argument("--out", type=Path, default=None,
                    help="validated records (JSONL; resumable; default: a temp file)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--timeout", type=float, default=600.0, help="per-worker limit (s)")
    ap.add_argument("--json", type=Path, default=None, help="write the summary here too")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a validator setting (ValidateConfig), e.g. timing_ci_pct=2; repeatable")
    args = ap.parse_args(argv)
    config: dict = {"timeout_s": args.timeout}
    for item in args.set:
        key, _, value = item.partition("=")
        try:
            config[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            config[key.strip()] = value

    from kernelmill.core.devices import resolve_device
    from kernelmill.validate.runner import validate_file

    if not args.path.is_dir():
        print(f"{args.path}: no such folder (a KernelBench checkout with level1/ ...)",
              file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="kb-audit-"))
    out = args.out or work / "validated.jsonl"
    counts = make_input(args.path, args.levels, args.limit, work / "problems.jsonl", args.match)
    if not sum(counts.values()):
        print(f"{args.path}: no problems in levels {args.levels}", file=sys.stderr)
        return 2
    device = resolve_device(args.device)
    start = time.monotonic()
    from kernelmill.core.errors import KernelmillError

    # a time limit's SIGTERM stops the run; the summary still covers what it validated
    signal.signal(signal.SIGTERM, _interrupt)
    cut = False
    earlier = sum(1 for line in out.read_text().splitlines() if line.strip()) \
        if out.exists() else 0  # a resumed run's records (validated before)
    try:
        stats = validate_file(work / "problems.jsonl", out, device=device, workers=args.workers,
                              config=config, progress=sys.stderr.isatty())
    except KernelmillError as exc:
        print(f"kernelbench_audit: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        cut, stats = True, None
    wall = time.monotonic() - start
    records = [json.loads(line) for line in out.read_text().splitlines() if line.strip()] \
        if out.exists() else []
    table, failures, summary = summarize(records, args.levels)
    done = stats.n_kept if stats is not None else len(records) - earlier
    if cut:
        print(f"kernelbench_audit: stopped after {wall:.0f} s; the summary counts the {done} "
              "problems validated by then (rerun with the same --out to go on)")
    print(f"KernelBench audit of {args.path} on {device}: levels {args.levels}, "
          f"{sum(counts.values())} problems ({done} validated now)")
    print(table)
    print(f"\nfailures ({len(failures)}):")
    for line in failures:
        print("  " + line)
    mem = summary["memory"]
    print(f"\nmemory: {mem.get('estimated', 0)} estimated, {mem.get('estimate unknown', 0)} "
          f"unknown, {mem.get('too_large', 0)} too large, {mem.get('rerun larger', 0)} rerun "
          f"beside others with a larger cap, {mem.get('rerun alone', 0)} rerun alone, "
          f"{mem.get('waited_s', 0):.0f} s waited for admission")
    if "underestimated" in mem:
        print(f"measured peak / estimate: min {mem['measured/estimate min']}, median "
              f"{mem['measured/estimate median']}, max {mem['measured/estimate max']} "
              f"({mem['most underestimated']}); {mem['underestimated']} underestimated")
    if "live/estimate median" in mem:
        print(f"live-tensor peak / estimate: median {mem['live/estimate median']}, max "
              f"{mem['live/estimate max']}; {mem['live over estimate']} over")
    if "replay live/estimate median" in mem:
        print(f"replay live-tensor peak / its estimate: median "
              f"{mem['replay live/estimate median']}, max {mem['replay live/estimate max']}; "
              f"{mem['replay live over estimate']} over")
    if "reserved/live median" in mem:
        print(f"allocator peak / live-tensor peak (either worker): median "
              f"{mem['reserved/live median']}, max {mem['reserved/live max']}")
    from kernelmill.validate.admission import gpu_occupancies, occupancy_line
    from kernelmill.validate.stage_times import grant_table, stage_table

    occupancies = gpu_occupancies()
    for occ in occupancies:
        print("GPU memory admission, " + occupancy_line(occ))

    print("\nwhere the workers' time went:\n" + stage_table(records))
    if len(occupancies) == 1:  # one GPU's budget: the grants' time against it
        capacity = int(occupancies[0]["capacity_gib"] * 2**30)
        print("\nwhere the GPU memory grants' time went:\n" + grant_table(records, capacity, wall))
    rate = done / wall * 3600 if wall > 0 and done else 0.0
    print(f"wall {wall:.1f} s for {done} problems: {rate:.0f} problems per hour")
    print(f"records: {out}")
    if args.json:
        args.json.write_text(json.dumps({**summary, "wall_s": wall, "validated": done,
                                         "per_hour": rate, "device": device,
                                         "occupancy": occupancies, "failures": failures}, indent=1))
    if cut:  # the slot threads are still inside their problems (minutes, each holding the
        # GPU): leave now; the run's watcher (``validate.reaper``) kills their workers
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
