"""Where a candidate worker's ``setup`` stage goes on a GPU before its guards are installed: the
runtime's start (``torch.cuda.init`` and a first allocation, made before the worker asks for the
GPU), the baseline kernels (``tasks._baseline``: cuBLAS's first GEMM, the host thread pool) and
the pinned staging buffer (``inputs.reserve_staging``) at several sizes, wall and CPU seconds of
each, in fresh processes (``benchmarks/worker_setup.py`` gives the guards' steps after them).

    python scripts/setup_probe.py [--runs 3] [--mb 64 256]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys

PROBE = r'''
import json, sys, time
import torch

def step(took, name, fn):
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    torch.cuda.synchronize()
    took[name] = (round(time.perf_counter() - wall, 4), round(time.process_time() - cpu, 4))

took = {}
step(took, "cuda start", lambda: torch.zeros(1, device="cuda"))
from kernelmill.grade.worker import tasks, inputs
step(took, "baseline", lambda: tasks._baseline("cuda"))
step(took, f"staging {sys.argv[1]} MB", lambda: inputs.reserve_staging(int(sys.argv[1]) << 20))
print(json.dumps(took))
'''


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--mb", type=int, nargs="+", default=[64, 256])
    args = parser.parse_args()
    for mb in args.mb:
        for run in range(args.runs):
            out = subprocess.run([sys.executable, "-c", PROBE, str(mb)], capture_output=True,
                                 text=True, check=False)
            lines = out.stdout.strip().splitlines()
            if out.returncode or not lines:
                print(f"{mb} MB run {run}: failed: {out.stderr.strip()[-300:]}")
                continue
            took = json.loads(lines[-1])
            print(f"{mb:4d} MB run {run}: " + "  ".join(
                f"{k} {w * 1e3:.0f} ms wall / {c * 1e3:.0f} ms CPU" for k, (w, c) in took.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
