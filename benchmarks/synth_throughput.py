"""Synthesis throughput and quality: problems/second, static-check pass rate, distinct ids, and a
CPU smoke run (shrunk to CPU size) of a random sample: executes, deterministic, input-dependent.

    python benchmarks/synth_throughput.py --n 1000 --seed 0 --smoke 50

Prints one table. CPU only; the GPU timing of the problems is the validator's job.
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import Counter
from pathlib import Path

from kernelmill.core.errors import ProblemError
from kernelmill.core.problem import check_source
from kernelmill.data import SEEDS_DIR
from kernelmill.synth.generate import synthesize
from kernelmill.synth.smoke import smoke_run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--smoke", type=int, default=50, help="problems in the CPU smoke run")
    parser.add_argument("--smoke-numel", type=int, default=16384,
                        help="largest tensor after shrinking for the smoke run")
    parser.add_argument("--out", help="keep the problems here (default: a temp file)")
    args = parser.parse_args()

    out = Path(args.out) if args.out else Path(tempfile.mkdtemp()) / "problems.jsonl"
    if out.exists():
        out.unlink()
    start = time.perf_counter()
    stats = synthesize(SEEDS_DIR, out, n=args.n, seed=args.seed)
    seconds = time.perf_counter() - start
    records = [json.loads(line) for line in out.read_text().splitlines()]
    passed = 0
    for r in records:
        try:
            check_source(r["source"], name=r["name"])
            passed += 1
        except ProblemError:
            pass
    generators = Counter(r["provenance"]["generator"] for r in records)
    categories = Counter(r["category"] for r in records)
    families = len({r["provenance"]["seed"] for r in records})
    report = smoke_run([r["source"] for r in records], sample=args.smoke, seed=args.seed,
                       max_numel=args.smoke_numel)

    rows = [
        ("problems written", f"{len(records)}"),
        ("wall seconds", f"{seconds:.1f}"),
        ("problems / second", f"{len(records) / seconds:.2f}"),
        ("pass check_source", f"{passed} ({passed / max(len(records), 1):.1%})"),
        ("distinct ids", f"{len({r['id'] for r in records})}"),
        ("families (provenance.seed)", f"{families}"),
        ("generators", ", ".join(f"{k} {v}" for k, v in generators.most_common())),
        ("categories", ", ".join(f"{k} {v}" for k, v in categories.most_common())),
        ("dropped", ", ".join(f"{k} {v}" for k, v in sorted(stats.drop_reasons().items())) or "-"),
        (f"CPU smoke run ({report.n} random)", f"{report.passed} pass ({report.pass_rate:.0%}) "
                                              f"in {report.seconds:.1f}s"),
        ("smoke failures", ", ".join(f"{k} {v}" for k, v in report.failures.items()) or "-"),
    ]
    width = max(len(k) for k, _ in rows)
    print(f"{'metric':<{width}}  value")
    print(f"{'-' * width}  {'-' * 40}")
    for key, value in rows:
        print(f"{key:<{width}}  {value}")


if __name__ == "__main__":
    main()
