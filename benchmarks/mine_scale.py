"""Mining at scale: `kernelmill mine` over installed libraries, one table row per source.

    python benchmarks/mine_scale.py [SOURCE ...] [--out runs/mine-bench] [--limit N]

Per source: candidates found, self-contained (gathered with no missing dependency), probed,
written (passed the static check), passed a CPU smoke run at shrunk size (in the harness's
confined workers: builds, returns a finite tensor, repeats exactly), distinct after dedup
(curate's exact keys, and MinHash near-duplicate groups at 0.8), categories covered, and
processed candidates per second of the mining run (wall clock, probing included; with
``--limit N`` only the first N candidates of a source are processed, the rest only counted). Sources that are not
installed are rows with their rejection. Default sources: torch.nn, torchvision, timm,
transformers.
"""
from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path

from kernelmill.core.problem import CATEGORIES
from kernelmill.core.store import read_records
from kernelmill.curate.dedup import dedup_records
from kernelmill.synth.resize import ResizeError, shrink_for_cpu
from kernelmill.validate.mining import MineOptions, _run_batches, mine

SMOKE = "kernelmill.validate.mine_sizing:smoke_batch"


def smoke(records, config: MineOptions) -> set[str]:
    jobs = []
    for record in records:
        try:
            source = shrink_for_cpu(record.source).source
        except ResizeError:
            source = record.source
        jobs.append({"key": record.id, "source": source})
    results = _run_batches(SMOKE, jobs, config, {})
    return {r["key"] for r in results if r.get("ok")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sources", nargs="*",
                        default=["torch.nn", "torchvision", "timm", "transformers"])
    parser.add_argument("--out", default="runs/mine-bench")
    parser.add_argument("--limit", type=int, default=0, help="candidates per source (0: all)")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    config = MineOptions(limit=args.limit, workers=args.workers)
    rows = []
    all_smoked = []
    for spec in args.sources:
        path = out / f"{spec.replace('/', '_')}.jsonl"
        start = time.monotonic()
        _, table = mine([spec], path, config, show_table=False)
        seconds = time.monotonic() - start
        row = table.get(spec, Counter())
        records = list(read_records(path)) if path.exists() else []
        passed = smoke(records, config)
        smoked = [r for r in records if r.id in passed]
        all_smoked += smoked
        kept = dedup_records([r.replace() for r in smoked], threshold=0.8, workers=1)
        cats = Counter(r.category for r in smoked)
        rows.append({"source": spec, "found": row.get("found", 0),
                     "processed": row.get("found", 0) - row.get("not processed (limit)", 0),
                     "self-contained": row.get("resolved", 0), "probed": row.get("probed", 0),
                     "written": row.get("written", 0), "smoke ok": len(smoked),
                     "distinct exact": len(kept),
                     "distinct near": len({r.dedup.near_group for r in kept}),
                     "categories": len(cats), "cand/s": round((row.get("found", 0) - row.get("not processed (limit)", 0))
                                   / seconds, 2)
                     if seconds else 0, "seconds": round(seconds),
                     "rejected": {k.removeprefix("rejected: "): v for k, v in row.items()
                                  if k.startswith("rejected: ")}})
    kept = dedup_records([r.replace() for r in all_smoked], threshold=0.8, workers=1)
    cats = Counter(r.category for r in all_smoked)
    total = {"source": "all", **{k: sum(r[k] for r in rows) for k in
                                 ("found", "processed", "self-contained", "probed", "written",
                                  "smoke ok",
                                  "seconds")},
             "distinct exact": len(kept), "distinct near": len({r.dedup.near_group for r in kept}),
             "categories": len(cats)}
    total["cand/s"] = round(total["processed"] / total["seconds"], 2) if total["seconds"] else 0
    columns = ["source", "found", "processed", "self-contained", "probed", "written", "smoke ok",
               "distinct exact", "distinct near", "categories", "cand/s", "seconds"]
    print(" | ".join(columns))
    for row in [*rows, total]:
        print(" | ".join(str(row.get(c, "")) for c in columns))
    print("categories:", dict(cats), "missing:", [c for c in CATEGORIES if c not in cats])
    for row in rows:
        print(row["source"], "rejected:", json.dumps(row["rejected"]))


if __name__ == "__main__":
    main()
