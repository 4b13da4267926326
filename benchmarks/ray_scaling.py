"""Validation through the Ray backend on 1 GPU and on every GPU of this machine: throughput, the
same verdicts, and what killing a host process mid-run costs.

Each configuration runs in a fresh process with its own local Ray (``CUDA_VISIBLE_DEVICES`` says
which GPUs it sees) and its own temporary folder (no compile cache or lock shared between runs),
on the same problems: the seeds plus ``--n-synth`` synthesized ones.

    python benchmarks/ray_scaling.py --out ray_out --n-synth 100 [--kill-after 8]
        [--cores-per-gpu 16] [--pair] [--runs one all kill] [--problems FILE] [--deadline S]
    python benchmarks/ray_scaling.py --table ray-1gpu-g0.json ray-2gpu.json ...

Prints one row per run: problems, wall time, first verdict, problems per GPU-hour over the whole
run and after the first verdict, how many passed, and how many verdicts (passed + flags) differ
from the first run. ``--kill-after N`` adds a run on every GPU that SIGKILLs one Ray host
process once N problems are done; every problem must still get its verdict.

``--pair`` runs the one-GPU configuration once per GPU, all at once, each pinned to its own
``--cores-per-gpu`` cores: a node of one GPU and N cores, with the host's other GPU as busy as in
the all-GPU run (memory bandwidth and caches shared alike), and the verdicts of two one-GPU runs
to compare. ``--runs`` picks the configurations, so the one-GPU and all-GPU runs can be made in
separate device calls and joined with ``--table`` from their result files. ``--deadline S`` stops
a run after S seconds with what it finished (its rate then leaves out the run's tail).
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


def _watch(out: Path, kill_after: int | None, stop: threading.Event, seen: dict,
           deadline: float | None = None, on_deadline=None) -> None:
    """Note when the first verdict lands and, every 5 s, how many are in; kill one host once
    ``kill_after`` verdicts are in; at ``deadline`` seconds call ``on_deadline``."""
    start = time.monotonic()
    seen["progress"] = []
    while not stop.wait(0.2):
        done = _count_lines(out)
        now = time.monotonic() - start
        if done and "first_s" not in seen:
            seen["first_s"] = now
        if not seen["progress"] or now - seen["progress"][-1][0] >= 5.0:
            seen["progress"].append((round(now, 1), done))
        if deadline and now >= deadline and on_deadline:
            seen["deadline_s"] = now
            on_deadline()
            return
        if kill_after and done >= kill_after and "killed" not in seen:
            pids = _host_pids()
            if pids:
                os.kill(pids[0], signal.SIGKILL)
                seen["killed"] = {"pid": pids[0], "after": done, "hosts": len(pids)}


def _verdicts(out: Path) -> tuple[dict, float]:
    """Each validated problem's (passed, flags), and the sum of the problems' own wall times."""
    verdicts, busy = {}, 0.0
    for line in out.open():
        try:
            row = json.loads(line)
        except ValueError:  # a line cut by the deadline
            continue
        checks = row["validation"].get("checks") or {}
        # each check's measured value beside the verdict: a verdict that differs between runs
        # is read against them (a timing check at its band's edge, or a real change)
        values = {name: c.get("value") for name, c in checks.items()
                  if isinstance(c, dict) and isinstance(c.get("value"), (int, float))}
        verdicts[row["id"]] = [row["validation"]["passed"], sorted(row["validation"]["flags"]),
                               values]
        busy += row["validation"].get("wall_s") or 0.0
    return verdicts, busy


def run_one(problems: Path, out: Path, kill_after: int | None, device: str,
            cores: list[int] | None = None, deadline: float | None = None,
            result_path: Path | None = None) -> dict:
    """One configuration (in its own process): validate ``problems`` through Ray, on the CPU
    cores ``cores`` only when given (Ray and every worker inherit the pinning). At ``deadline``
    seconds the result so far is written to ``result_path`` and the process ends."""
    import ray
    from kernelmill.validate.runner import validate_file

    if cores:
        os.sched_setaffinity(0, cores)
    ray.init(include_dashboard=False, log_to_driver=False, num_cpus=len(cores) if cores else None)
    resources = ray.cluster_resources()
    seen: dict = {}
    start = time.monotonic()

    def result(counts: dict) -> dict:
        verdicts, busy = _verdicts(out)
        return {"gpus": int(resources.get("GPU", 0)), "cpus": int(resources.get("CPU", 0)),
                "problems": len(verdicts), "expected": _count_lines(problems),
                "wall_s": seen.get("deadline_s") or time.monotonic() - start,
                "first_s": seen.get("first_s"), "killed": seen.get("killed"),
                "stopped_at_deadline": "deadline_s" in seen, "item_wall_s": round(busy, 1),
                "progress": seen.get("progress"), "counts": counts, "verdicts": verdicts}

    def stop_at_deadline() -> None:
        if result_path:
            result_path.write_text(json.dumps(result({})))
        os._exit(0)  # Ray's reaper ends the local cluster; workers die with their parents

    stop = threading.Event()
    watcher = threading.Thread(target=_watch, args=(out, kill_after, stop, seen, deadline,
                                                    stop_at_deadline), daemon=True)
    watcher.start()
    stats = validate_file(problems, out, device=device, backend="ray", progress=False)
    stop.set()
    row = result(dict(stats.counts))
    ray.shutdown()
    return row


def start(name: str, gpus: str, problems: Path, out_dir: Path, kill_after: int | None,
          device: str = "cuda", cores: list[int] | None = None,
          deadline: float | None = None) -> tuple[str, Path, subprocess.Popen]:
    """Start one configuration in its own process with its own local Ray and temp folder."""
    tmp = Path(tempfile.mkdtemp(prefix="r", dir="/tmp"))  # short: Ray's socket paths live there
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": gpus, "TMPDIR": str(tmp), "RAY_TMPDIR": str(tmp)}
    result_path = out_dir / f"{name}.json"
    result_path.unlink(missing_ok=True)
    (out_dir / f"{name}.jsonl").unlink(missing_ok=True)
    command = [sys.executable, __file__, "--one", str(problems), str(out_dir / f"{name}.jsonl"),
               str(result_path), "--device", device]
    if kill_after:
        command += ["--kill-after", str(kill_after)]
    if cores:
        command += ["--cores", ",".join(map(str, cores))]
    if deadline:
        command += ["--deadline", str(deadline)]
    print(f"== {name}: CUDA_VISIBLE_DEVICES={gpus}"
          + (f", cores {cores[0]}-{cores[-1]}" if cores else ""), flush=True)
    return name, result_path, subprocess.Popen(command, env=env)


def finish(name: str, result_path: Path, process: subprocess.Popen) -> dict:
    code = process.wait()
    if not result_path.exists():
        return {"name": name, "error": f"exit status {code}"}
    return {"name": name, **json.loads(result_path.read_text())}


def launch(name: str, gpus: str, problems: Path, out_dir: Path, kill_after: int | None,
           device: str = "cuda", cores: list[int] | None = None,
           deadline: float | None = None) -> dict:
    return finish(*start(name, gpus, problems, out_dir, kill_after, device, cores, deadline))


def per_hour(count: int, seconds: float | None) -> float | None:
    return None if not seconds else count / seconds * 3600


def steady_rate(row: dict) -> float | None:
    """Problems per hour between 10% and 90% of the verdicts (no start-up, no tail)."""
    points = row.get("progress") or []
    total = row["problems"]
    lo = next((p for p in points if p[1] >= 0.1 * total), None)
    hi = next((p for p in points if p[1] >= 0.9 * total), None)
    if not lo or not hi or hi[0] <= lo[0]:
        return None
    return (hi[1] - lo[1]) / (hi[0] - lo[0]) * 3600


def _value(verdict: list, name: str) -> str:
    """A check's measured value in a verdict (results written before values were kept: -)."""
    value = (verdict[2] if len(verdict) > 2 else {}).get(name)
    return "-" if value is None else f"{value:.4g}"


def table(rows: list[dict]) -> None:
    base = next((r for r in rows if "verdicts" in r), None)
    print(f"\n{'run':<14} {'GPUs':>4} {'cores':>5} {'problems':>8} {'wall s':>7} {'first s':>7} "
          f"{'/GPU-h':>7} {'/h':>7} {'/h after 1st':>12} {'/h 10-90%':>9} {'busy':>5} "
          f"{'passed':>6} {'differ':>6}")
    for row in rows:
        if "error" in row:
            print(f"{row['name']:<14} {row['error']}")
            continue
        first = row["first_s"] or 0.0
        passed = sum(1 for v in row["verdicts"].values() if v[0])
        differ = [pid for pid, v in row["verdicts"].items()
                  if pid in base["verdicts"] and base["verdicts"][pid][:2] != v[:2]]
        rate = per_hour(row["problems"], row["wall_s"])
        steady = steady_rate(row)
        # mean problems in flight: the problems' own wall times over the run's
        busy = (row.get("item_wall_s") or 0.0) / max(row["wall_s"], 1e-9)
        print(f"{row['name']:<14} {row['gpus']:>4} {row['cpus']:>5} {row['problems']:>8} "
              f"{row['wall_s']:>7.1f} {first:>7.1f} {rate / max(1, row['gpus']):>7.0f} {rate:>7.0f} "
              f"{per_hour(row['problems'], row['wall_s'] - first) or 0:>12.0f} "
              f"{steady or 0:>9.0f} {busy:>5.1f} {passed:>6} {len(differ):>6}")
        if row.get("stopped_at_deadline"):
            print(f"    stopped at its deadline: {row['problems']} of {row['expected']} validated")
        for pid in differ[:10]:
            was, now = base["verdicts"][pid], row["verdicts"][pid]
            moved = sorted(set(was[1]) ^ set(now[1]))
            values = "".join(f" {name} {_value(was, name)} -> {_value(now, name)};"
                             for name in moved)
            print(f"    {pid}: {was[:2]} -> {now[:2]}{values}")
        if row.get("killed"):
            print(f"    killed host pid {row['killed']['pid']} after {row['killed']['after']} "
                  f"verdicts ({row['killed']['hosts']} hosts); {row['problems']} of "
                  f"{row['expected']} problems got a verdict")
    whole = [r for r in rows if "wall_s" in r and not r.get("killed")]
    ones = [r for r in whole if r["gpus"] == 1]
    many = [r for r in whole if r["gpus"] > 1]
    if ones and many:
        one, big = ones[0], many[0]
        rate = lambda r: per_hour(r["problems"], r["wall_s"])
        after = lambda r: per_hour(r["problems"], r["wall_s"] - (r["first_s"] or 0))
        print(f"\nspeed-up {big['gpus']} GPUs / 1 GPU ({one['name']}): whole run "
              f"{rate(big) / rate(one):.2f}x, after the first verdict {after(big) / after(one):.2f}x"
              + (f", 10-90% {steady_rate(big) / steady_rate(one):.2f}x"
                 if steady_rate(big) and steady_rate(one) else ""))


def run_configs(args: argparse.Namespace, problems: Path, out_dir: Path, gpus: int) -> list[dict]:
    """The runs ``args.runs`` asks for, one after the other (the one-GPU pair at once)."""
    every = ",".join(str(i) for i in range(gpus))
    host = sorted(os.sched_getaffinity(0))
    per = args.cores_per_gpu

    def cores(first_gpu: int, count: int) -> list[int] | None:
        return host[first_gpu * per:(first_gpu + count) * per] if per else None

    rows = []
    if "one" in args.runs:
        if args.pair and gpus > 1:
            started = [start(f"ray-1gpu-g{g}", str(g), problems, out_dir, None, args.device,
                             cores(g, 1) or host[g * len(host) // gpus:(g + 1) * len(host) // gpus],
                             args.deadline) for g in range(gpus)]
            rows += [finish(*s) for s in started]
        else:
            rows.append(launch("ray-1gpu", "0", problems, out_dir, None, args.device, cores(0, 1),
                               args.deadline))
        table(rows)
    if "all" in args.runs and gpus > 1:
        rows.append(launch(f"ray-{gpus}gpu", every, problems, out_dir, None, args.device,
                           cores(0, gpus), args.deadline))
        table(rows)
    if "kill" in args.runs and args.kill_after:
        subset = problems
        if args.kill_limit:
            subset = out_dir / "problems_kill.jsonl"
            lines = problems.read_text().splitlines()[:args.kill_limit]
            subset.write_text("".join(line + "\n" for line in lines))
        rows.append(launch(f"ray-{gpus}gpu-kill", every, subset, out_dir, args.kill_after,
                           args.device, cores(0, gpus), args.deadline))
        table(rows)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="ray_out")
    parser.add_argument("--n-synth", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--limit", type=int, help="only the first N seeds")
    parser.add_argument("--problems", help="validate these problems (JSONL) instead of the seeds "
                        "and --n-synth synthesized ones")
    parser.add_argument("--runs", nargs="*", default=["one", "all", "kill"],
                        choices=("one", "all", "kill"))
    parser.add_argument("--pair", action="store_true", help="the one-GPU run once per GPU, at "
                        "once, each on its own cores")
    parser.add_argument("--deadline", type=float, help="stop each run after this many seconds")
    parser.add_argument("--kill-after", type=int, help="the kill run kills a host after N")
    parser.add_argument("--kill-limit", type=int, help="the kill run validates only the first N "
                        "problems (default: all)")
    parser.add_argument("--device", default="cuda", help="cpu: a smoke run of this script")
    parser.add_argument("--cores-per-gpu", type=int, help="pin each run to this many CPU cores "
                        "per GPU it uses (a cluster of nodes with one GPU and N cores each; "
                        "default: every run gets all cores)")
    parser.add_argument("--table", nargs="+", metavar="RESULT", help="print the table of these "
                        "result files (written by earlier runs) and stop")
    parser.add_argument("--one", nargs=3, metavar=("PROBLEMS", "OUT", "RESULT"),
                        help=argparse.SUPPRESS)
    parser.add_argument("--cores", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.table:
        table([{"name": Path(p).stem, **json.loads(Path(p).read_text())} for p in args.table])
        return 0
    if args.one:
        problems, out, result = (Path(p) for p in args.one)
        cores = [int(c) for c in args.cores.split(",")] if args.cores else None
        Path(result).write_text(json.dumps(run_one(problems, out, args.kill_after, args.device,
                                                   cores, args.deadline, Path(result))))
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
    if args.problems:
        problems.write_bytes(Path(args.problems).read_bytes())
        print(f"problems: {_count_lines(problems)} from {args.problems}", flush=True)
    else:
        print(f"problems: {make_input(problems, args.n_synth, args.seed, args.limit)}", flush=True)
    rows = run_configs(args, problems, out_dir, gpus)
    (out_dir / "ray_scaling.json").write_text(json.dumps(
        [{k: v for k, v in r.items() if k != "verdicts"} for r in rows], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
