"""Validate the seed problems (+ synthesized ones when synthesis is available) on a device.

Prints which checks failed how often, the eager-runtime and Inductor-speedup distributions, the
difficulty tiers, the problems that failed with their reasons, and the throughput in problems
per GPU-hour. Writes ``validated.jsonl`` and ``validate_throughput.json`` to ``--out``.

    python benchmarks/validate_throughput.py --out gpu_out [--n-synth 200] [--device cuda]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import Counter
from pathlib import Path


def percentiles(values: list[float], points=(10, 50, 90)) -> dict[str, float | None]:
    values = sorted(v for v in values if v is not None)
    if not values:
        return {f"p{p}": None for p in points}
    out = {}
    for p in points:
        k = (len(values) - 1) * p / 100
        lo, hi = int(k), min(int(k) + 1, len(values) - 1)
        out[f"p{p}"] = values[lo] + (values[hi] - values[lo]) * (k - lo)
    return out


def make_input(path: Path, n_synth: int, seed: int, limit: int | None = None) -> dict[str, int]:
    from kernelmill.core.interop import import_folder
    from kernelmill.data import SEEDS_DIR

    path.unlink(missing_ok=True)
    result = import_folder(SEEDS_DIR, path, generator="seed")
    counts = {"seeds": result.stats.n_kept, "synthesized": 0}
    if limit:
        lines = path.read_text().splitlines()[:limit]
        path.write_text("".join(line + "\n" for line in lines))
        counts["seeds"] = len(lines)
    if n_synth:
        try:
            from kernelmill.synth.generate import synthesize
        except ImportError:
            print("kernelmill.synth.generate not available: seeds only", file=sys.stderr)
            return counts
        synth_path = path.with_name("synthesized.jsonl")
        synth_path.unlink(missing_ok=True)
        synthesize(SEEDS_DIR, synth_path, n=n_synth, seed=seed)
        with path.open("a") as out:
            for line in synth_path.read_text().splitlines():
                out.write(line + "\n")
                counts["synthesized"] += 1
    return counts


def fmt(x, spec=".3g") -> str:
    return "-" if x is None else format(x, spec)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="gpu_out")
    parser.add_argument("--n-synth", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--workers", type=int)
    parser.add_argument("--no-inductor", action="store_true")
    parser.add_argument("--limit", type=int, help="validate only the first N seeds (smoke run)")
    parser.add_argument("--resume", action="store_true",
                        help="keep problems.jsonl/validated.jsonl of an interrupted run")
    args = parser.parse_args(argv)

    from kernelmill.core.devices import resolve_device
    from kernelmill.validate.runner import validate_file

    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    problems = out_dir / "problems.jsonl"
    validated = out_dir / "validated.jsonl"
    if args.resume and problems.exists():
        counts = {"seeds": None, "synthesized": None}
    else:
        counts = make_input(problems, args.n_synth, args.seed, args.limit)
        validated.unlink(missing_ok=True)
    device = resolve_device(args.device)
    n_gpus = 1
    if device.startswith("cuda"):
        import torch

        n_gpus = max(1, torch.cuda.device_count())
    config = {"inductor": False} if args.no_inductor else {}
    start = time.monotonic()
    stats = validate_file(problems, validated, device=device, workers=args.workers,
                          config=config)
    wall = time.monotonic() - start

    records = [json.loads(line) for line in validated.read_text().splitlines()]
    vals = [r["validation"] for r in records]
    flags = Counter(f for v in vals for f in v["flags"])
    skipped = Counter(name for v in vals for name, c in v["checks"].items()
                      if c["passed"] is None)
    eager = [v["eager_ms"] for v in vals if v["eager_ms"]]
    speed = [v["inductor_speedup"] for v in vals if v.get("inductor_speedup")]
    headroom = [v["headroom"] for v in vals if v.get("headroom")]
    walls = [v.get("wall_s") for v in vals if v.get("wall_s")]
    tiers = Counter((v.get("difficulty") or {}).get("tier") for v in vals if v["passed"])
    n = len(vals)
    if args.resume:
        seeds = sum((r.get("provenance") or {}).get("generator") == "seed" for r in records)
        counts = {"seeds": seeds, "synthesized": n - seeds}
    resumed = stats.counts.get("already validated", 0)
    done_now = n - resumed
    per_gpu_hour = done_now / (wall / 3600) / n_gpus if wall > 0 and done_now else None

    print(f"\ndevice {device} x{n_gpus}; {counts['seeds']} seeds + {counts['synthesized']} "
          f"synthesized = {n} problems ({resumed} from an earlier run) in {wall:.1f}s; "
          f"{sum(v['passed'] for v in vals)} passed")
    print(f"throughput: {fmt(per_gpu_hour, '.0f')} problems per GPU-hour; "
          f"per-problem wall (worker time) p50 {fmt(percentiles(walls)['p50'])} s")
    print("\ncheck                failed  skipped")
    names = sorted({name for v in vals for name in v["checks"]})
    for name in names:
        print(f"{name:<20} {flags.get(name, 0):>6}  {skipped.get(name, 0):>7}")
    print("\ndistribution         p10       p50       p90")
    for label, values in (("eager ms", eager), ("inductor speedup", speed),
                          ("roofline headroom", headroom)):
        p = percentiles(values)
        print(f"{label:<20} {fmt(p['p10']):>8}  {fmt(p['p50']):>8}  {fmt(p['p90']):>8}  "
              f"(n={len(values)})")
    print("\ndifficulty tiers (passed):", dict(tiers))
    from kernelmill.validate.stage_times import stage_table

    print("\nwhere the workers' time went:\n" + stage_table(records))
    from kernelmill.validate.admission import gpu_occupancies, occupancy_line

    for occ in gpu_occupancies():
        print("GPU memory admission, " + occupancy_line(occ))
    failed_seeds = [(r["name"], v["flags"], {f: v["checks"][f]["detail"] for f in v["flags"]})
                    for r, v in zip(records, vals)
                    if not v["passed"] and (r.get("provenance") or {}).get("generator") == "seed"]
    print(f"\nseeds failing: {len(failed_seeds)}")
    for name, fl, details in failed_seeds:
        print(f"  {name}: {', '.join(fl)}")
        for flag, detail in details.items():
            print(f"      {flag}: {detail[:160]}")
    summary = {"device": device, "gpus": n_gpus, "problems": n, "passed": stats.n_kept,
               "wall_s": wall, "problems_per_gpu_hour": per_gpu_hour, "inputs": counts,
               "failed_checks": dict(flags), "skipped_checks": dict(skipped),
               "eager_ms": percentiles(eager), "inductor_speedup": percentiles(speed),
               "headroom": percentiles(headroom), "tiers": dict(tiers),
               "worker_wall_s": percentiles(walls),
               "mean_worker_wall_s": statistics.mean(walls) if walls else None,
               "failed_seeds": failed_seeds, "stats": stats.to_dict()}
    (out_dir / "validate_throughput.json").write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
