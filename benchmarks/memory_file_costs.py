"""What writing a grade's tensors into memory files costs the host, alone and several writers
at once: a reference run writes each trial's inputs and outputs into a fresh memory file, whose
pages are allocated as it writes (``fresh``); the same bytes into pages already there
(``reused``); and through a mapping asking for huge pages (``huge``: taken only where the
host's transparent huge pages for shared memory allow it). How fast the host makes CUDA
contexts is ``scripts/context_probe.py``'s.

    python benchmarks/memory_file_costs.py [--writers 1 4 16] [--gib 1]

Prints per number of writers at once: the wall time until the last is done, and each writer's
median and largest wall seconds and median CPU seconds per GiB.
"""
from __future__ import annotations

import argparse
import mmap
import multiprocessing as mp
import os
import resource
import statistics
import time


def _cpu_s() -> float:
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime


def _write(barrier, queue, nbytes: int, how: str) -> None:
    data = memoryview(bytearray(os.urandom(1 << 20)) * (64))  # 64 MiB of source
    fd = os.memfd_create("kernelmill-cost", 0)
    if how in ("reused", "huge"):
        os.ftruncate(fd, nbytes)
    if how == "reused":  # the pages there before the timed write
        for offset in range(0, nbytes, len(data)):
            os.pwrite(fd, data[:min(len(data), nbytes - offset)], offset)
    barrier.wait()
    began, cpu = time.monotonic(), _cpu_s()
    if how == "huge":
        view = mmap.mmap(fd, nbytes)
        if hasattr(mmap, "MADV_HUGEPAGE"):
            view.madvise(mmap.MADV_HUGEPAGE)
        for offset in range(0, nbytes, len(data)):
            n = min(len(data), nbytes - offset)
            view[offset:offset + n] = data[:n]
        view.close()
    else:
        for offset in range(0, nbytes, len(data)):
            os.pwrite(fd, data[:min(len(data), nbytes - offset)], offset)
    queue.put((time.monotonic() - began, _cpu_s() - cpu, time.monotonic()))
    os.close(fd)


def _at_once(target, count: int, *args) -> tuple[float, list[float], list[float]]:
    ctx = mp.get_context("fork")
    barrier, queue = ctx.Barrier(count + 1), ctx.Queue()
    procs = [ctx.Process(target=target, args=(barrier, queue, *args)) for _ in range(count)]
    for p in procs:
        p.start()
    barrier.wait()
    began = time.monotonic()
    got = [queue.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
    return max(g[2] for g in got) - began, [g[0] for g in got], [g[1] for g in got]


def _row(label: str, count: int, makespan: float, walls: list[float], cpus: list[float],
         per: float = 1.0) -> str:
    return (f"{label:<22} {count:>7} {makespan:>10.2f} {statistics.median(walls) / per:>12.3f} "
            f"{max(walls) / per:>9.3f} {statistics.median(cpus) / per:>10.3f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writers", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--gib", type=float, default=1.0)
    args = parser.parse_args()
    head = f"{'what':<22} {'writers':>7} {'makespan s':>10} {'median wall':>12} {'max wall':>9} " \
           f"{'median CPU':>10}"
    nbytes = int(args.gib * 2**30)
    try:
        with open("/sys/kernel/mm/transparent_hugepage/shmem_enabled") as f:
            shmem = f.read().strip()
    except OSError:
        shmem = "unknown"
    print(f"writing {args.gib:g} GiB into a memory file, seconds per GiB "
          f"(transparent huge pages for shared memory: {shmem})")
    print(head)
    for how in ("fresh", "reused", "huge"):
        for count in args.writers:
            print(_row(how, count, *_at_once(_write, count, nbytes, how), per=args.gib),
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
