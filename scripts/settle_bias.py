"""Whether a turn that ran unsettled (right after the same member's own turn: the window
setting ``settle_same``) reads as the member's settled turns, from kept verdicts.

    python scripts/settle_bias.py VERDICTS... [--group-only]

VERDICTS: verdict files (``.jsonl`` or ``.jsonl.gz``, as ``grade_throughput.py
--keep-verdicts`` writes them) or folders of them, or a ``window_verdicts.tgz`` from
``scripts/gpu_check.sh window``. For each problem, singles and groups apart, and for the
reference and the candidate: each turn's median over the member's median turn in that window,
for the turns listed in the verdict's ``profile.unsettled_rounds`` against the others (the
median and mean ratio, and how many turns). A bias shows as unsettled turns reading apart
from 1.0 where the settled ones do not. Verdicts without ``unsettled_rounds`` are skipped.
"""
from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
import tarfile
from collections import defaultdict
from pathlib import Path


def _lines(path: Path):
    """Each JSON line of a verdict file, a folder of them or a tar archive of them."""
    if path.is_dir():
        for child in sorted(path.rglob("*.jsonl*")):
            yield from _lines(child)
    elif path.name.endswith((".tgz", ".tar.gz")):
        with tarfile.open(path) as archive:
            for member in archive:
                if member.isfile() and ".jsonl" in member.name:
                    data = archive.extractfile(member).read()
                    if member.name.endswith(".gz"):
                        data = gzip.decompress(data)
                    yield from data.decode().splitlines()
    elif path.name.endswith(".gz"):
        with gzip.open(path, "rt") as handle:
            yield from handle
    else:
        yield from path.read_text().splitlines()


def turn_ratios(verdict: dict) -> dict | None:
    """``{who: {"unsettled": [ratio...], "settled": [ratio...]}}`` of one verdict, each turn's
    median over the member's median turn; None where the verdict keeps no such record."""
    profile = verdict.get("profile") or {}
    medians, unsettled = profile.get("round_medians_ms"), profile.get("unsettled_rounds")
    if not isinstance(medians, dict) or not isinstance(unsettled, dict):
        return None
    found = {}
    for who in ("reference", "candidate"):
        turns = [(r, ms) for r, ms in medians.get(who) or () if ms and ms > 0]
        if len(turns) < 2:
            continue
        middle = statistics.median(ms for _r, ms in turns)
        after = set(unsettled.get(who) or ())
        found[who] = {"unsettled": [ms / middle for r, ms in turns if r in after],
                      "settled": [ms / middle for r, ms in turns if r not in after]}
    return found


def summarize(paths: list[Path], group_only: bool = False) -> dict:
    """Ratios pooled by (problem, singles or group, who, settled or not)."""
    pooled: dict = defaultdict(list)
    for path in paths:
        for line in _lines(path):
            line = line.strip()
            if not line:
                continue
            try:
                verdict = json.loads(line)
            except json.JSONDecodeError:
                print(f"{path}: a line that is not JSON skipped", file=sys.stderr)
                continue
            ratios = turn_ratios(verdict)
            if not ratios:
                continue
            kind = "group" if (verdict.get("profile") or {}).get("group", 1) > 1 else "single"
            if group_only and kind != "group":
                continue
            for who, parts in ratios.items():
                for settled, values in parts.items():
                    pooled[(verdict.get("problem_id"), kind, who, settled)].extend(values)
    return pooled


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("verdicts", nargs="+", type=Path)
    parser.add_argument("--group-only", action="store_true")
    args = parser.parse_args()
    missing = [str(p) for p in args.verdicts if not p.exists()]
    if missing:
        parser.error(f"no such file or folder: {', '.join(missing)}")
    pooled = summarize(args.verdicts, args.group_only)
    if not pooled:
        print("no verdict keeps unsettled_rounds (made before the window recorded them?)")
        return
    print(f"{'problem':32} {'kind':6} {'who':9} {'turns':>14} {'median':>15} {'mean':>15}")
    print(f"{'':32} {'':6} {'':9} {'unsettled/else':>14} {'unsettled/else':>15} "
          f"{'unsettled/else':>15}")
    keys = sorted({k[:3] for k in pooled}, key=lambda k: tuple(str(v) for v in k))
    for problem, kind, who in keys:
        after = pooled.get((problem, kind, who, "unsettled")) or []
        other = pooled.get((problem, kind, who, "settled")) or []

        def stat(values, fn):
            return f"{fn(values):.4f}" if values else "-"

        print(f"{str(problem)[:32]:32} {kind:6} {who:9} {len(after):>6}/{len(other):<7} "
              f"{stat(after, statistics.median):>7}/{stat(other, statistics.median):<7} "
              f"{stat(after, statistics.mean):>7}/{stat(other, statistics.mean):<7}")


if __name__ == "__main__":
    main()
