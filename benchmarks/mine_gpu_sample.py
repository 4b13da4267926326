"""Mined problems through the validator on a device: a random sample, at their chosen sizes.

    python benchmarks/mine_gpu_sample.py MINED.jsonl [MORE.jsonl ...] --n 200 --device cuda \\
        [--seed 0] [--out validated.jsonl] [--json summary.json]

Samples ``--n`` records (``--seed``) from the mined files, validates them
(``kernelmill.validate.runner.validate_file``; resumable with the same ``--out``) and prints: how
many passed, the failures by their first check (and every flag's count), how many of those that
passed run inside the runtime band (the ``runtime`` check) and eager's time quantiles, per source
package.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path


def sample(paths: list[Path], n: int, seed: int) -> list[dict]:
    rows = [json.loads(line) for path in paths for line in path.read_text().splitlines()
            if line.strip()]
    random.Random(seed).shuffle(rows)
    return rows[:n]


def _package(record: dict) -> str:
    provenance = record.get("provenance") or {}
    mined = provenance.get("mined") or provenance
    return str(mined.get("package") or provenance.get("generator") or "?")


def summarize(records: list[dict]) -> tuple[str, dict]:
    per: dict[str, Counter] = defaultdict(Counter)
    first: Counter = Counter()
    flags: Counter = Counter()
    eager = []
    for record in records:
        validation = record.get("validation") or {}
        package = _package(record)
        per[package]["validated"] += 1
        if validation.get("passed"):
            per[package]["passed"] += 1
            runtime = (validation.get("checks") or {}).get("runtime") or {}
            per[package]["in band"] += bool(runtime.get("passed"))
            if validation.get("eager_ms") is not None:
                eager.append(float(validation["eager_ms"]))
        else:
            found = validation.get("flags") or ["runs"]
            first[found[0]] += 1
            flags.update(found)
    total = Counter()
    for counts in per.values():
        total.update(counts)
    lines = [f"{'source':<16}{'validated':>10}{'passed':>8}{'in band':>9}"]
    for package, counts in sorted(per.items()) + [("all", total)]:
        lines.append(f"{package:<16}{counts['validated']:>10}{counts['passed']:>8}"
                     f"{counts['in band']:>9}")
    eager.sort()
    quantiles = {q: round(eager[int(q * (len(eager) - 1))], 4) for q in (0.1, 0.5, 0.9)} \
        if eager else {}
    lines.append(f"\npassed {total['passed']}/{total['validated']} "
                 f"({total['passed'] / max(1, total['validated']):.0%}); in the runtime band "
                 f"{total['in band']}/{total['passed']} of those; eager ms quantiles {quantiles}")
    lines.append("failed, by first check: " + ", ".join(f"{k} {v}" for k, v in first.most_common()))
    lines.append("every flag: " + ", ".join(f"{k} {v}" for k, v in flags.most_common()))
    return "\n".join(lines), {"per_source": {k: dict(v) for k, v in per.items()},
                              "first_check": dict(first), "flags": dict(flags),
                              "eager_ms_quantiles": quantiles}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mined", type=Path, nargs="+", help="mined records (JSONL)")
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--out", type=Path, default=None, help="validated records (resumable)")
    ap.add_argument("--json", type=Path, default=None, help="write the summary here too")
    ap.add_argument("--summarize", action="store_true",
                    help="only summarize what --out holds (a run cut short)")
    args = ap.parse_args(argv)
    if args.summarize:
        records = [json.loads(line) for line in args.out.read_text().splitlines()
                   if line.strip()]
        print(summarize(records)[0])
        return 0

    from kernelmill.validate.runner import validate_file

    work = Path(tempfile.mkdtemp(prefix="mine-sample-"))
    chosen = sample(args.mined, args.n, args.seed)
    if not chosen:
        print("mine_gpu_sample: no mined records", file=sys.stderr)
        return 2
    problems = work / "sample.jsonl"
    problems.write_text("".join(json.dumps(r) + "\n" for r in chosen))
    out = args.out or work / "validated.jsonl"
    start = time.monotonic()
    validate_file(problems, out, device=args.device, workers=args.workers,
                  progress=sys.stderr.isatty())
    wall = time.monotonic() - start
    records = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    table, summary = summarize(records)
    print(f"mined sample: {len(chosen)} of {', '.join(map(str, args.mined))} on {args.device}")
    print(table)
    print(f"wall {wall:.0f} s: {len(records) / wall * 3600 if wall else 0:.0f} problems per hour")
    if args.json:
        args.json.write_text(json.dumps({**summary, "wall_s": wall, "n": len(records)}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
