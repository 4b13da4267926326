"""Validation through the Ray backend on 1 GPU and on every GPU of this machine: throughput, the
same verdicts, and what killing a host process mid-run costs.

Each configuration runs in a fresh process with its own local Ray (``CUDA_VISIBLE_DEVICES`` says
which GPUs it sees) and its own temporary folder (no compile cache or lock shared between runs),
on the same problems: the seeds plus ``--n-synth`` synthesized ones.

    python benchmarks/ray_scaling.py --out ray_out --n-synth 100 [--kill-after 8]
        [--cores-per-gpu 16]

Prints one row per run: problems, wall time, first verdict, problems per GPU-hour over the whole
run and after the first verdict, how many passed, and how many verdicts (passed + flags) differ
from the one-GPU run. ``--kill-after N`` adds a run on every GPU that SIGKILLs one Ray host
process once N problems are done; every problem must still get its verdict.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path


def _host_pids() -> list[int]:
    """Ray host actors of this machine (their process title starts with ``ray::_Host``)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if cmdline.startswith(b"ray::_Host"):
                pids.append(int(entry.name))
    return pids


def _count_lines(path: Path) -> int:
    try:
        return sum(1 for _ in path.open())
    except FileNotFoundError:
        return 0


def _watch(out: Path, kill_after: int | None, stop: threading.Event, seen: dict) -> None:
    """Note when the first verdict lands; kill one host once ``kill_after`` verdicts are in."""
    start = time.monotonic()
    while not stop.wait(0.2):
        done = _count_lines(out)
        if done and "first_s" not in seen:
            seen["first_s"] = time.monotonic() - start
        if kill_after and done >= kill_after and "killed" not in seen:
            pids = _host_pids()
            if pids:
                os.kill(pids[0], signal.SIGKILL)
                seen["killed"] = {"pid": pids[0], "after": done, "hosts": len(pids)}


def run_one(problems: Path, out: Path, kill_after: int | None, device: str,
            cores: int | None = None) -> dict:
    """One configuration (in its own process): validate ``problems`` through Ray, on the
    first ``cores`` CPU cores only when given (Ray and every worker inherit the pinning)."""
    import ray
    from kernelmill.validate.runner import validate_file

    if cores:
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:cores])
    ray.init(include_dashboard=False, log_to_driver=False, num_cpus=cores)
    resources = ray.cluster_resources()
    seen: dict = {}
    stop = threading.Event()
    watcher = threading.Thread(target=_watch, args=(out, kill_after, stop, seen), daemon=True)
    start = time.monotonic()
    watcher.start()
    stats = validate_file(problems, out, device=device, backend="ray", progress=False)
    wall = time.monotonic() - start
    stop.set()
    ray.shutdown()
    verdicts = {}
    for line in out.open():
        row = json.loads(line)
        verdicts[row["id"]] = [row["validation"]["passed"], sorted(row["validation"]["flags"])]
    return {"gpus": int(resources.get("GPU", 0)), "cpus": int(resources.get("CPU", 0)),
            "problems": len(verdicts), "expected": _count_lines(problems), "wall_s": wall, "first_s": seen.get("first_s"),
            "killed": seen.get("killed"), "counts": dict(stats.counts), "verdicts": verdicts}


def launch(name: str, gpus: str, problems: Path, out_dir: Path, kill_after: int | None,
           device: str = "cuda", cores_per_gpu: int | None = None) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="r", dir="/tmp"))  # short: Ray's socket paths live there
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": gpus, "TMPDIR": str(tmp), "RAY_TMPDIR": "/tmp/ray"}
    result_path = out_dir / f"{name}.json"
    command = [sys.executable, __file__, "--one", str(problems), str(out_dir / f"{name}.jsonl"),
               str(result_path), "--device", device]
    if kill_after:
        command += ["--kill-after", str(kill_after)]
    if cores_per_gpu:
        command += ["--cores-per-gpu", str(cores_per_gpu)]
    print(f"== {name}: CUDA_VISIBLE_DEVICES={gpus}"
          + (f", {cores_per_gpu} cores per GPU" if cores_per_gpu else ""), flush=True)
    done = subprocess.run(command, env=env, check=False)
    if done.returncode != 0:
        return {"name": name, "error": f"exit status {done.returncode}"}
    return {"name": name, **json.loads(result_path.read_text())}


def per_hour(count: int, seconds: float | None) -> float | None:
    return None if not seconds else count / seconds * 3600


def table(rows: list[dict]) -> None:
    base = next((r for r in rows if "verdicts" in r), None)
    print(f"\n{'run':<12} {'GPUs':>4} {'cores':>5} {'problems':>8} {'wall s':>7} {'first s':>7} "
          f"{'/GPU-h':>7} {'/h':>7} {'/h after 1st':>12} {'passed':>6} {'differ':>6}")
    for row in rows:
        if "error" in row:
            print(f"{row['name']:<12} {row['error']}")
            continue
        first = row["first_s"] or 0.0
        passed = sum(1 for v in row["verdicts"].values() if v[0])
        differ = [pid for pid, v in row["verdicts"].items()
                  if pid in base["verdicts"] and base["verdicts"][pid] != v]
        rate = per_hour(row["problems"], row["wall_s"])
        print(f"{row['name']:<12} {row['gpus']:>4} {row['cpus']:>5} {row['problems']:>8} {row['wall_s']:>7.1f} "
              f"{first:>7.1f} {rate / max(1, row['gpus']):>7.0f} {rate:>7.0f} "
              f"{per_hour(row['problems'], row['wall_s'] - first) or 0:>12.0f} {passed:>6} "
              f"{len(differ):>6}")
        for pid in differ[:10]:
            print(f"    {pid}: {base['verdicts'][pid]} -> {row['verdicts'][pid]}")
        if row.get("killed"):
            print(f"    killed host pid {row['killed']['pid']} after {row['killed']['after']} "
                  f"verdicts ({row['killed']['hosts']} hosts); {row['problems']} of "
                  f"{row['expected']} problems got a verdict")
    if len(rows) > 1 and all("wall_s" in r for r in rows[:2]):
        one, many = rows[0], rows[1]
        print(f"\nspeed-up {many['gpus']} GPUs / 1 GPU: whole run "
              f"{one['wall_s'] / many['wall_s']:.2f}x, after the first verdict "
              f"{(one['wall_s'] - (one['first_s'] or 0)) / (many['wall_s'] - (many['first_s'] or 0)):.2f}x")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="ray_out")
    parser.add_argument("--n-synth", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--limit", type=int, help="only the first N seeds")
    parser.add_argument("--kill-after", type=int, help="also a run that kills a host after N")
    parser.add_argument("--kill-limit", type=int, help="the kill run validates only the first N "
                        "problems (default: all)")
    parser.add_argument("--device", default="cuda", help="cpu: a smoke run of this script")
    parser.add_argument("--cores-per-gpu", type=int, help="pin each run to this many CPU cores "
                        "per GPU it uses (a cluster of nodes with one GPU and N cores each; "
                        "default: every run gets all cores)")
    parser.add_argument("--one", nargs=3, metavar=("PROBLEMS", "OUT", "RESULT"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        problems, out, result = (Path(p) for p in args.one)
        gpus_seen = len((os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(","))
        cores = args.cores_per_gpu * gpus_seen if args.cores_per_gpu else None
        Path(result).write_text(json.dumps(run_one(problems, out, args.kill_after, args.device,
                                                   cores)))
        return 0
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import torch
    from validate_throughput import make_input

    gpus = torch.cuda.device_count() if args.device == "cuda" else 2
    if gpus < 1:
        print("ray_scaling: no CUDA device", file=sys.stderr)
        return 2
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    problems = out_dir / "problems.jsonl"
    counts = make_input(problems, args.n_synth, args.seed, args.limit)
    print(f"problems: {counts}", flush=True)
    every = ",".join(str(i) for i in range(gpus))
    cores = args.cores_per_gpu
    rows = [launch("ray-1gpu", "0", problems, out_dir, None, args.device, cores)]
    table(rows)
    if gpus > 1:
        rows.append(launch(f"ray-{gpus}gpu", every, problems, out_dir, None, args.device, cores))
        table(rows)
    if args.kill_after:
        subset = problems
        if args.kill_limit:
            subset = out_dir / "problems_kill.jsonl"
            lines = problems.read_text().splitlines()[:args.kill_limit]
            subset.write_text("".join(line + "\n" for line in lines))
        rows.append(launch(f"ray-{gpus}gpu-kill", every, subset, out_dir, args.kill_after,
                           args.device, cores))
        table(rows)
    (out_dir / "ray_scaling.json").write_text(json.dumps(
        [{k: v for k, v in r.items() if k != "verdicts"} for r in rows], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
