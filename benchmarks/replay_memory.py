"""Where a validation replay's GPU memory goes, stage by stage (CUDA only).

Runs ``replay.replay_problem`` (rebuild, eager forward, Inductor compile and check, the eager and
Inductor timing windows) for each problem file in a fresh process of its own, uncapped, and
prints for every stage the peak of live tensors and the peak the caching allocator reserved
during it, with the problem's replay estimate beside them. A stage whose reserve is several times
its live tensors is what makes a capped replay run out of memory while sharing the GPU.

    python benchmarks/replay_memory.py .kb/level2/25_Conv2d_Min_Tanh_Tanh.py [...] \
        [--expandable] [--capped] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path


def _one(path: str, expandable: bool, capped: bool) -> dict:
    """In this process: the replay of ``path`` with each stage's peaks recorded; ``capped``:
    under the cap a validation run gives it (``CAP_FACTOR`` times its grant)."""
    import torch
    from kernelmill.validate import harness_worker, replay
    from kernelmill.validate.admission import ALLOCATOR_FACTOR, CAP_FACTOR
    from kernelmill.validate.settings import ValidateConfig
    from kernelmill.validate.worker_budgets import _estimate_memory

    source = Path(path).read_text()
    memory = _estimate_memory(source, ValidateConfig(), True)
    cap = int((memory.get("replay_bytes") or 0) * ALLOCATOR_FACTOR * CAP_FACTOR) or None
    stages: list[dict] = []
    current = ["start"]

    def close_stage() -> None:
        stages.append({"stage": current[0],
                       "allocated_gib": torch.cuda.max_memory_allocated() / 2**30,
                       "reserved_gib": torch.cuda.max_memory_reserved() / 2**30})
        torch.cuda.reset_peak_memory_stats()

    def mark(name: str, **_kw) -> None:
        if torch.cuda.is_initialized():
            close_stage()
        current[0] = name

    harness_worker.mark_stage = mark
    payload = {"source": source, "device": "cuda", "seed": 0, "lock": None,
               "memory_cap": cap if capped else None, "expandable": expandable, "copies": False,
               "inductor": True, "time": True, "time_eager": True}
    error = None
    try:
        replay.replay_problem(payload)
    except Exception as exc:  # noqa: BLE001 — reported in the table
        error = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
    close_stage()
    return {"problem": Path(path).stem, "expandable": expandable, "capped": capped,
            "cap_gib": (cap or 0) / 2**30 if capped else None, "error": error,
            "replay_estimate_gib": (memory.get("replay_bytes") or 0) / 2**30, "stages": stages}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*")
    ap.add_argument("--expandable", action="store_true", help="expandable segments too")
    ap.add_argument("--capped", action="store_true",
                    help="also under the cap a validation run gives the replay")
    ap.add_argument("--json", default=None)
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(_one(args.one, args.expandable, args.capped)))
        return 0
    results = []
    for path in args.files:
        variants = [(e, c) for e in ([False, True] if args.expandable else [False])
                    for c in ([False, True] if args.capped else [False])]
        for expandable, capped in variants:
            cmd = [sys.executable, __file__, "--one", path] + \
                (["--expandable"] if expandable else []) + (["--capped"] if capped else [])
            done = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=600)
            lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
            if not lines:
                print(f"{Path(path).stem}: failed: {done.stderr.strip().splitlines()[-1:]}")
                continue
            result = json.loads(lines[-1])
            results.append(result)
            cap = f"; capped at {result['cap_gib']:.2f} GiB" if capped else ""
            print(f"\n{result['problem']} (expandable={expandable}{cap}; replay estimate "
                  f"{result['replay_estimate_gib']:.2f} GiB){'; ' + result['error'] if result['error'] else ''}")
            print(f"  {'stage':34s} {'live GiB':>9s} {'reserved GiB':>13s} {'ratio':>6s}")
            for s in result["stages"]:
                ratio = s["reserved_gib"] / s["allocated_gib"] if s["allocated_gib"] else 0.0
                print(f"  {s['stage']:34s} {s['allocated_gib']:9.2f} {s['reserved_gib']:13.2f} "
                      f"{ratio:6.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
