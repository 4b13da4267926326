"""Where one problem's probe spends its time: the validation probe of each named KernelBench
problem run in this process (no worker, no sandbox, the GPU alone), each stage timed with the
device synchronized at its marks, then the functions under cProfile that took the most time.

    python scripts/probe_profile.py [--kernelbench DIR] [--device cuda] [--top N] NAME ...

NAME picks problem files by substring (``23_Softmax``, ``SELU``).
"""
import argparse
import cProfile
import io
import itertools
import pstats
import sys
import time
from pathlib import Path

from kernelmill.validate import harness_worker
from kernelmill.validate.ablation import ablations
from kernelmill.validate.probe import probe_problem

parser = argparse.ArgumentParser()
parser.add_argument("names", nargs="+")
parser.add_argument("--kernelbench", default=None)
parser.add_argument("--device", default="cuda")
parser.add_argument("--top", type=int, default=25)
args = parser.parse_args()

roots = [Path(args.kernelbench)] if args.kernelbench else [
    Path(".kb"), Path("../shared/benchmarks/kernelbench"), Path("shared/benchmarks/kernelbench")]
root = next((r for r in roots if r.is_dir()), None)
if root is None:
    sys.exit("no KernelBench folder: pass --kernelbench DIR")
files = sorted(p for p in root.glob("level*/*.py") if any(n in p.name for n in args.names))

marks: list[tuple[str, float]] = []
original = harness_worker.mark_stage


def timed_mark(stage: str) -> None:
    import torch

    if args.device.startswith("cuda"):
        torch.cuda.synchronize()
    marks.append((stage, time.monotonic()))
    original(stage)


harness_worker.mark_stage = timed_mark

for path in files:
    source = path.read_text()
    payload = {"source": source, "device": args.device, "seed": 0,
               "ablations": ablations(source, 8), "config": {}, "lock": None,
               "resized": None, "rebuild_in_process": False, "time": False}
    marks.clear()
    profile = cProfile.Profile()
    began = time.monotonic()
    try:
        profile.runcall(probe_problem, payload)
        outcome = "ok"
    except Exception as exc:  # noqa: BLE001 — a failing problem is reported, not fatal
        outcome = f"{type(exc).__name__}: {str(exc)[:120]}"
    timed_mark("end")
    wall = time.monotonic() - began
    print(f"== {path.parent.name}/{path.name}: {wall:.2f} s ({outcome})", flush=True)
    spans: dict[str, float] = {}
    for (stage, at), (_, nxt) in itertools.pairwise(marks):
        spans[stage] = spans.get(stage, 0.0) + nxt - at
    print("   stages (device synchronized at each mark): " + ", ".join(
        f"{k} {v:.2f}" for k, v in sorted(spans.items(), key=lambda kv: -kv[1]) if v >= 0.05))
    for order in ("tottime", "cumulative"):
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats(order).print_stats(args.top)
        lines = [ln for ln in text.getvalue().splitlines() if ln.strip()][4:]
        print(f"   -- by {order}")
        print("\n".join("   " + ln[:200] for ln in lines), flush=True)
