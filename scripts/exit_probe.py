"""What a CUDA worker's exit costs: the CPU seconds and wall time between its last word and
its reaping, by what it held (device memory in one piece or many, page-locked and touched host
memory, a profiler session, a captured graph). A grade's candidate worker ends with ``os._exit``
right after sending its result (``harness_worker``'s ``send`` stage); its teardown is the
kernel's and the driver's work, counted in the worker's CPU.

Usage: python scripts/exit_probe.py [--repeats N] [--json PATH]   (on a CUDA machine)
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

CHILD = r'''
import json, os, resource, sys, time
cfg = json.loads(sys.argv[1])
import torch
x = torch.zeros(1, device="cuda")
torch.cuda.synchronize()
keep = []
if cfg.get("dev_gb"):
    pieces = cfg.get("dev_pieces", 1)
    size = int(cfg["dev_gb"] * 2**30 / pieces)
    keep += [torch.ones(size, dtype=torch.uint8, device="cuda") for _ in range(pieces)]
if cfg.get("pinned_mb"):
    pinned = torch.empty(cfg["pinned_mb"] << 20, dtype=torch.uint8, pin_memory=True)
    pinned.numpy().fill(1)
    keep.append(pinned)
if cfg.get("host_mb"):
    host = torch.empty(cfg["host_mb"] << 20, dtype=torch.uint8)
    host.numpy().fill(1)
    keep.append(host)
if cfg.get("profiler"):
    from torch.profiler import ProfilerActivity, profile
    session = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
    session.__enter__()
    a = torch.randn(256, 256, device="cuda")
    for _ in range(200):
        a = a @ a / 256
    torch.cuda.synchronize()
    if cfg["profiler"] == "ended":
        session.__exit__(None, None, None)
        session.key_averages()
if cfg.get("graph"):
    a = torch.randn(1024, 1024, device="cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        a @ a
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = [a @ a for _ in range(cfg["graph"])]
    graph.replay()
    keep += [graph, outs]
torch.cuda.synchronize()
ru = resource.getrusage(resource.RUSAGE_SELF)
print("ready", ru.ru_utime + ru.ru_stime, flush=True)
sys.stdout.flush()
os._exit(0)
'''

CASES = {
    "context only": {},
    "device 4 GiB, 1 piece": {"dev_gb": 4},
    "device 4 GiB, 512 pieces": {"dev_gb": 4, "dev_pieces": 512},
    "device 16 GiB, 64 pieces": {"dev_gb": 16, "dev_pieces": 64},
    "page-locked 512 MiB": {"pinned_mb": 512},
    "host touched 1 GiB": {"host_mb": 1024},
    "profiler running": {"profiler": "running"},
    "profiler ended": {"profiler": "ended"},
    "graph of 64 calls": {"graph": 64},
    "a worker's all": {"dev_gb": 4, "dev_pieces": 256, "pinned_mb": 256, "host_mb": 1024,
                       "profiler": "ended", "graph": 64},
}


def once(cfg: dict) -> tuple[float, float, float]:
    """(CPU before its last word, CPU of its exit, wall of its exit) of one child."""
    proc = subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(cfg)],
                            stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline().split()
    said = time.monotonic()
    _pid, _status, usage = os.wait4(proc.pid, 0)
    gone = time.monotonic()
    proc.returncode = 0
    before = float(line[1]) if len(line) == 2 and line[0] == "ready" else float("nan")
    return before, usage.ru_utime + usage.ru_stime - before, gone - said


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json")
    args = parser.parse_args()
    rows = {}
    print(f"{'held':28s} {'CPU before s':>13s} {'exit CPU s':>11s} {'exit wall s':>12s}")
    for name, cfg in CASES.items():
        got = [once(cfg) for _ in range(args.repeats)]
        rows[name] = got
        med = [sorted(v[i] for v in got)[len(got) // 2] for i in range(3)]
        print(f"{name:28s} {med[0]:13.2f} {med[1]:11.3f} {med[2]:12.3f}", flush=True)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(rows, handle, indent=1)


if __name__ == "__main__":
    main()
