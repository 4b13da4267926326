"""Which work of other processes slows a timed CUDA graph on the same GPU?

A timing window holds the GPU's lock exclusively, but work that never takes the lock still
reaches the GPU: a new worker's CUDA context, the monitor's ``nvidia-smi``, a process's memory
allocations. This script replays a captured graph (32 fp16 2k GEMMs, about 1.5 ms) back to back,
timed by CUDA events, once alone and once beside each kind of outside work, and prints how much
each stretches the replays (median, p90, p99, the share over 1.3x the quiet median).

    python scripts/interference_probe.py [--seconds 6]
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import threading
import time

import torch

CONTEXT = "import torch; torch.zeros(1, device='cuda'); torch.cuda.synchronize()"
TINY = ("import time, torch\nx = torch.zeros(1, device='cuda')\nend = time.time() + {s}\n"
        "while time.time() < end:\n    x.add_(1); torch.cuda.synchronize(); time.sleep(0.01)\n")
ALLOC = ("import time, torch\nend = time.time() + {s}\n"
         "while time.time() < end:\n    t = torch.empty(1 << 30, dtype=torch.uint8, device='cuda')\n"
         "    del t; torch.cuda.empty_cache(); time.sleep(0.1)\n")


def graph_of(calls: int = 32, n: int = 2048):
    a = torch.randn(n, n, device="cuda", dtype=torch.float16)
    b = torch.randn(n, n, device="cuda", dtype=torch.float16)
    out = torch.empty(n, n, device="cuda", dtype=torch.float16)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for _ in range(3):
            torch.mm(a, b, out=out)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            torch.mm(a, b, out=out)
    return graph


def replays(graph, seconds: float) -> list[float]:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times, stop = [], time.monotonic() + seconds
    while time.monotonic() < stop:
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return times


def beside(kind: str, seconds: float, done: threading.Event) -> None:
    """Outside work of ``kind`` until ``done``."""
    procs: list[subprocess.Popen] = []
    try:
        if kind == "nvidia-smi 1/s":
            while not done.wait(1.0):
                subprocess.run(["nvidia-smi", "--query-gpu=utilization.gpu,memory.used",
                                "--format=csv,noheader"], capture_output=True, check=False)
        elif kind == "new contexts x4":
            while not done.is_set():
                procs = [p for p in procs if p.poll() is None]
                while len(procs) < 4:
                    procs.append(subprocess.Popen([sys.executable, "-c", CONTEXT]))
                time.sleep(0.05)
        elif kind == "tiny kernel /10ms":
            procs.append(subprocess.Popen([sys.executable, "-c", TINY.format(s=seconds + 10)]))
            done.wait()
        elif kind == "1 GiB alloc /100ms":
            procs.append(subprocess.Popen([sys.executable, "-c", ALLOC.format(s=seconds + 10)]))
            done.wait()
    finally:
        for p in procs:
            p.kill()
            p.wait()


def describe(times: list[float], quiet: float) -> str:
    ordered = sorted(times)

    def pick(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    over = sum(t > 1.3 * quiet for t in times) / len(times)
    return (f"{len(times):>6} {statistics.median(times):>9.3f} {pick(0.9):>9.3f} "
            f"{pick(0.99):>9.3f} {max(times):>9.3f} {over:>8.1%}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=6.0)
    args = parser.parse_args()
    graph = graph_of()
    replays(graph, 1.0)  # clocks up
    quiet = statistics.median(replays(graph, args.seconds))
    print(f"{'outside work':22} {'replays':>6} {'median ms':>9} {'p90':>9} {'p99':>9} "
          f"{'max':>9} {'>1.3x':>8}")
    for kind in ("none", "nvidia-smi 1/s", "new contexts x4", "tiny kernel /10ms",
                 "1 GiB alloc /100ms", "none"):
        done = threading.Event()
        thread = None
        if kind != "none":
            thread = threading.Thread(target=beside, args=(kind, args.seconds, done))
            thread.start()
            time.sleep(3.0 if "contexts" in kind or "kernel" in kind or "alloc" in kind else 0)
        times = replays(graph, args.seconds)
        done.set()
        if thread is not None:
            thread.join()
        print(f"{kind:22} {describe(times, quiet)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
