"""Eager GPU time of synthesized problems: does the composer's size targeting land in 0.3-30 ms?

    kernelmill synth --n 1000 --seed 0 --out problems.jsonl        # on any machine
    python benchmarks/synth_gpu_timing.py problems.jsonl --sample 200   # on the GPU machine

Imports only torch and the standard library (runs on a bare GPU image). Prints one table: how
many sampled problems ran, the share under 0.3 ms / within 0.3-30 ms / over 30 ms, the median per
generator and per category, and the estimate-vs-measured ratio for composed problems.
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from collections import defaultdict

import torch


def _to(obj, device):
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to(o, device) for o in obj)
    return obj


def time_problem(source: str, device: str, iters: int = 10) -> float:
    namespace: dict = {"__name__": "kernelmill_timing"}
    exec(compile(source, "<problem>", "exec"), namespace)  # noqa: S102 — our own problems
    torch.manual_seed(0)
    model = namespace["Model"](*namespace["get_init_inputs"]()).to(device)
    inputs = _to(namespace["get_inputs"](), device)
    with torch.no_grad():
        for _ in range(3):
            model(*inputs)
        torch.cuda.synchronize()
        times = []
        for _ in range(iters):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            model(*inputs)
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
    del model, inputs
    torch.cuda.empty_cache()
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problems", help="records file written by kernelmill synth")
    parser.add_argument("--sample", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("synth_gpu_timing: needs a CUDA device", file=sys.stderr)
        return 2
    records = [json.loads(line) for line in open(args.problems, encoding="utf-8") if line.strip()]
    random.Random(args.seed).shuffle(records)
    records = records[:args.sample]
    measured, errors = [], defaultdict(int)
    for r in records:
        try:
            ms = time_problem(r["source"], "cuda")
        except Exception as exc:  # noqa: BLE001
            errors[type(exc).__name__] += 1
            torch.cuda.empty_cache()
            continue
        measured.append((ms, r))
    if not measured:
        print("no problem ran")
        return 1
    ms_all = sorted(m for m, _ in measured)
    n = len(ms_all)
    rows = [("problems timed", f"{n} of {len(records)}"),
            ("errors", ", ".join(f"{k} {v}" for k, v in errors.items()) or "-"),
            ("< 0.3 ms", f"{sum(m < 0.3 for m in ms_all) / n:.0%}"),
            ("0.3 - 30 ms", f"{sum(0.3 <= m <= 30 for m in ms_all) / n:.0%}"),
            ("> 30 ms", f"{sum(m > 30 for m in ms_all) / n:.0%}"),
            ("median / p10 / p90 ms", f"{statistics.median(ms_all):.3f} / "
                                      f"{ms_all[n // 10]:.3f} / {ms_all[(9 * n) // 10]:.3f}")]
    by_gen, by_cat = defaultdict(list), defaultdict(list)
    for ms, r in measured:
        by_gen[r["provenance"]["generator"]].append(ms)
        by_cat[r["category"]].append(ms)
    ratios = [ms / r["provenance"]["operations"][0]["estimated_ms"] for ms, r in measured
              if r["provenance"]["generator"] == "composer"
              and r["provenance"]["operations"][0].get("estimated_ms")]
    if ratios:
        ratios.sort()
        rows.append(("measured / estimated (composer)",
                     f"median {statistics.median(ratios):.2f}, p10 {ratios[len(ratios) // 10]:.2f}, "
                     f"p90 {ratios[(9 * len(ratios)) // 10]:.2f}"))
    for key, values in sorted(by_gen.items()):
        rows.append((f"median ms, {key}", f"{statistics.median(values):.3f} ({len(values)})"))
    for key, values in sorted(by_cat.items()):
        rows.append((f"median ms, category {key}", f"{statistics.median(values):.3f} ({len(values)})"))
    width = max(len(k) for k, _ in rows)
    print(f"{'metric':<{width}}  value\n{'-' * width}  {'-' * 30}")
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
