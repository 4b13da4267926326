"""What the Ray backend's driver (the head node's queue) costs per item, as the cluster grows.

No GPU and no problem is needed: a local Ray with ``--gpus`` GPUs declared (none real), one host
actor per GPU as validation and grading use (``RayBackend(device="cuda")``), and items that
sleep ``--task-ms`` and return a result the size of a validation record. Prints, per layout,
items per second through the driver, the driver's CPU seconds per item, and the ceiling that
puts on a cluster (GPUs it can keep fed at the per-GPU rate given by ``--per-gpu-hour``).

    python benchmarks/ray_dispatch.py [--gpus 2 8] [--per-host 32] [--items 2000]
        [--task-ms 0] [--result-kb 4] [--per-gpu-hour 2368]
"""
from __future__ import annotations

import argparse
import resource
import sys
import time


def _task(item: int, slot: dict) -> dict:
    """Module-level (the backend's contract): wait, then return a record-sized result."""
    seconds, size = _task.settings  # type: ignore[attr-defined]
    if seconds:
        time.sleep(seconds)
    return {"item": item, "payload": "x" * size}


def _driver_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure(gpus: int, per_host: int, items: int, task_ms: float, result_kb: int) -> dict:
    import ray
    from kernelmill.validate.ray_backend import RayBackend

    ray.init(include_dashboard=False, log_to_driver=False, num_cpus=2, num_gpus=gpus)
    _task.settings = (task_ms / 1e3, result_kb * 1024)  # type: ignore[attr-defined]
    try:
        backend = RayBackend(device="cuda", per_host=per_host)
        warm = list(backend.map_unordered(_task, range(gpus * 2)))  # actors up, code shipped
        assert len(warm) == gpus * 2
        start, cpu = time.monotonic(), _driver_cpu()
        done = sum(1 for _ in backend.map_unordered(_task, range(items)))
        wall, cpu = time.monotonic() - start, _driver_cpu() - cpu
    finally:
        ray.shutdown()
    return {"gpus": gpus, "per_host": per_host, "in_flight": gpus * per_host, "items": done,
            "wall_s": wall, "per_s": done / wall, "driver_cpu_ms": cpu / done * 1e3}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, nargs="+", default=[2, 8])
    parser.add_argument("--per-host", type=int, default=32)
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--task-ms", type=float, default=0.0)
    parser.add_argument("--result-kb", type=int, default=4)
    parser.add_argument("--per-gpu-hour", type=float, default=2368.0,
                        help="problems one GPU validates per hour (benchmarks/README.md)")
    args = parser.parse_args(argv)
    rows = [measure(g, args.per_host, args.items, args.task_ms, args.result_kb)
            for g in args.gpus]
    need = args.per_gpu_hour / 3600
    print(f"{'GPUs':>5} {'in flight':>9} {'items':>6} {'wall s':>7} {'items/s':>8} "
          f"{'driver CPU ms/item':>18} {'GPUs fed':>9}")
    for r in rows:
        print(f"{r['gpus']:>5} {r['in_flight']:>9} {r['items']:>6} {r['wall_s']:>7.1f} "
              f"{r['per_s']:>8.1f} {r['driver_cpu_ms']:>18.2f} {r['per_s'] / need:>9.0f}")
    print(f"GPUs fed: how many GPUs at {args.per_gpu_hour:.0f} problems per GPU-hour the driver "
          "keeps busy at that dispatch rate (items/s over the per-GPU rate)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
