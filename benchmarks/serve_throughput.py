"""The grading service against the direct batch grader, and a many-client run that loses nothing.

    python benchmarks/serve_throughput.py [--device cpu] [--backend local|ray] [--actors 2]
        [--n 48] [--group 8] [--jobs 1000] [--clients 16] [--skip-load]

Part 1, the same N submissions (honest kernels, wrong ones, crashes and syntax errors on the
test fixtures' tiny problems, each text unique so no verdict is reused) graded twice: by
``grade_file`` (the batch grader, ``--actors`` slots, groups of ``--group``) and through the
service (``--actors`` actors, one request, groups of ``--group``). Both are warmed first (each
slot or actor grades one group untimed). Prints wall time, throughput, the service's share of
the direct throughput, and the service's submit-to-verdict p50/p95 beside the batch's mean time
per group.

Part 2, ``--jobs`` submissions from ``--clients`` concurrent clients on loopback (requests of
8, a queue bound that makes them wait with 429s): every job must come back answered once with
the verdict its kind expects (honest: correct; wrong: incorrect; syntax: not compiled), and the
service's counters must add up. The run stops by itself (``--timeout``).

Part 3 (``--per-sample N``), an RL trainer's per-sample reward calls (verl's ``compute_score``
run in parallel): N submissions of one problem from N clients at once, each in a request of its
own; once with every request graded alone (``group`` 1, as the service did before it joined
them) and once with ``--group`` and the default ``group_wait_s`` (the requests join their
problem's group). Prints the wall time and the groups the actors were handed.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kernelmill.core.store import read_jsonl
from kernelmill.grade.batch import default_slots_per_gpu, grade_file
from kernelmill.grade.policy import Policy
from kernelmill.grade.service.app import Running
from kernelmill.grade.service.client import ServiceClient
from kernelmill.grade.service.core import ServeConfig, Service

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "submissions"
KINDS = [  # (fixture, problem, expected outcome)
    ("honest_scale_add", "ref_scale_add", "correct"),
    ("honest_row_sum", "ref_row_sum", "correct"),
    ("wrong_scale_add", "ref_scale_add", "incorrect"),
    ("crash_raise", "ref_scale_add", "error"),
    ("crash_syntax", "ref_row_sum", "not compiled"),
]


def source(name: str) -> str:
    if name == "wrong_scale_add":
        return (FIXTURES / "honest_scale_add.py").read_text().replace("2.0 * x + y", "3.0 * x + y")
    return (FIXTURES / f"{name}.py").read_text()


def submissions(n: int, tag: str) -> list[dict]:
    rows = []
    for i in range(n):
        name, problem, kind = KINDS[i % len(KINDS)]
        rows.append({"submission_id": f"{tag}{i}", "problem_id": problem, "kind": kind,
                     "source": source(name) + f"\n# {tag} {i}\n"})
    rows.sort(key=lambda r: r["problem_id"])  # the batch groups consecutive rows of a problem
    return rows


def matches(kind: str, verdict: dict) -> bool:
    if kind == "correct":
        return bool(verdict.get("correct")) and not verdict.get("hacks")
    if kind == "incorrect":
        return not verdict.get("correct") and not verdict.get("error")
    if kind == "error":
        return not verdict.get("correct") and bool(verdict.get("error"))
    return not verdict.get("compiled")


def slots(args) -> int:
    """Grades at once: the actors asked for, else the batch's default for one GPU."""
    return args.actors or default_slots_per_gpu(1)


def write_inputs(folder: Path, rows: list[dict]) -> tuple[Path, Path]:
    problems = folder / "problems.jsonl"
    problems.write_text("".join(json.dumps({"id": p.stem, "source": p.read_text()}) + "\n"
                                for p in sorted(FIXTURES.glob("ref_*.py"))))
    subs = folder / f"subs-{rows[0]['submission_id']}.jsonl"
    subs.write_text("".join(json.dumps({k: r[k] for k in ("submission_id", "problem_id",
                                                           "source")}) + "\n" for r in rows))
    return problems, subs


def direct(args, folder: Path, rows: list[dict], policy: Policy) -> dict:
    warm = submissions(slots(args) * 2, "warm-direct")
    problems, warm_subs = write_inputs(folder, warm)
    grade_file(problems, warm_subs, folder / "warm.jsonl", device=args.device,
               workers=args.actors, backend=args.backend, policy=policy, cache_path=False,
               group=args.group)
    _, subs = write_inputs(folder, rows)
    out = folder / "direct.jsonl"
    started = time.monotonic()
    grade_file(problems, subs, out, device=args.device, workers=args.actors,
               backend=args.backend, policy=policy, cache_path=False, group=args.group)
    wall = time.monotonic() - started
    verdicts = {r["submission_id"]: r for r in read_jsonl(out)}
    wrong = sum(not matches(r["kind"], verdicts[r["submission_id"]]) for r in rows)
    groups = -(-len(rows) // args.group)
    return {"wall": wall, "wrong": wrong, "per_group": wall * slots(args) / max(1, groups)}


def service_config(args, problems: Path, policy: Policy, queue: int = 100_000) -> ServeConfig:
    return ServeConfig(dataset=str(problems), device=args.device, backend=args.backend,
                       actors=args.actors, group=args.group, queue=queue, policy=policy,
                       token="", max_wait_s=30)


def through_service(args, folder: Path, rows: list[dict], policy: Policy) -> dict:
    problems, _ = write_inputs(folder, rows)
    service = Service(service_config(args, problems, policy))
    with Running(service) as url:
        client = ServiceClient(url)
        warm = submissions(slots(args) * args.group, "warm-service")
        client.grade([{k: r[k] for k in ("problem_id", "source")} for r in warm])
        service.table.seconds.clear()
        started = time.monotonic()
        views = client.grade([{k: r[k] for k in ("submission_id", "problem_id", "source")}
                              for r in rows])
        wall = time.monotonic() - started
        health = client.health()
    wrong = sum(v["status"] != "done" or not matches(r["kind"], v["verdict"])
                for r, v in zip(rows, views))
    return {"wall": wall, "wrong": wrong, "p50": health["p50_s"], "p95": health["p95_s"]}


def load(args, folder: Path, policy: Policy) -> dict:
    rows = submissions(args.jobs, "load")
    problems, _ = write_inputs(folder, rows)
    per_client = [rows[i::args.clients] for i in range(args.clients)]
    service = Service(service_config(args, problems, policy, queue=args.queue))
    deadline = time.monotonic() + args.timeout

    def client_run(mine: list[dict]) -> tuple[list[dict], list[dict], int]:
        client = ServiceClient(url, backoff_s=0.2, give_up_s=args.timeout)
        ids = []
        for start in range(0, len(mine), 8):
            ids += client.submit([{k: r[k] for k in ("submission_id", "problem_id", "source")}
                                  for r in mine[start:start + 8]])
        return mine, client.wait(ids, timeout_s=max(1.0, deadline - time.monotonic())), \
            client.refused

    with Running(service) as url:
        started = time.monotonic()
        with ThreadPoolExecutor(args.clients) as pool:
            results = list(pool.map(client_run, per_client))
        wall = time.monotonic() - started
        with urllib.request.urlopen(f"{url}/metrics", timeout=30) as answer:
            text = answer.read().decode()
        late = service.table.late
    views = [(r, v) for mine, vs, _ in results for r, v in zip(mine, vs)]
    answered = sum(float(m) for m in re.findall(r"^kernelmill_verdicts_total\{.*\} (\S+)$",
                                                text, re.MULTILINE))
    return {"wall": wall, "jobs": len(views),
            "unanswered": sum(v["status"] not in ("done", "error") for _r, v in views),
            "errors": sum(v["status"] == "error" for _r, v in views),
            "wrong": sum(v["status"] == "done" and not matches(r["kind"], v["verdict"])
                         for r, v in views),
            "ids": len({v["id"] for _r, v in views}), "answered": int(answered), "late": late,
            "refused": sum(r for _m, _v, r in results)}


def per_sample(args, folder: Path, policy: Policy, group: int, tag: str) -> dict:
    """``--per-sample`` honest submissions of one problem, one request each, all at once."""
    rows = [{"problem_id": "ref_scale_add",
             "source": source("honest_scale_add") + f"\n# {tag} {i}\n"}
            for i in range(args.per_sample)]
    problems, _ = write_inputs(folder, [{"submission_id": tag, **r} for r in rows])
    config = service_config(args, problems, policy)
    config.group = group
    service = Service(config)
    with Running(service) as url:
        client = ServiceClient(url)
        client.grade([{"problem_id": "ref_scale_add",  # warm: every actor grades once
                       "source": source("honest_scale_add") + f"\n# warm {tag} {i}\n"}
                      for i in range(slots(args))])
        joined = client.health().get("joined", 0)
        started = time.monotonic()
        with ThreadPoolExecutor(len(rows)) as pool:
            views = list(pool.map(lambda row: ServiceClient(url).grade([row])[0], rows))
        wall = time.monotonic() - started
        health = client.health()
    return {"wall": wall, "wrong": sum(v["status"] != "done" or not matches("correct",
                                                                            v["verdict"])
                                       for v in views),
            "joined": health.get("joined", 0) - joined, "p50": health["p50_s"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--backend", choices=("local", "ray"), default="local")
    parser.add_argument("--actors", type=int, help="slots / actors (default 2 on CPU; on CUDA "
                        "the batch's slots, and one service host grading in as many)")
    parser.add_argument("--n", type=int, default=48, help="part 1 submissions")
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=1000, help="part 2 submissions")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--queue", type=int, default=64, help="part 2 queue bound")
    parser.add_argument("--timeout", type=float, default=1800.0, help="part 2 stops by then")
    parser.add_argument("--skip-load", action="store_true")
    parser.add_argument("--skip-compare", action="store_true")
    parser.add_argument("--per-sample", type=int, default=0,
                        help="part 3: this many one-submission requests of one problem at once")
    args = parser.parse_args(argv)
    if args.actors is None and args.device.startswith("cpu"):
        args.actors = 2
    if args.device.startswith("cpu"):  # the fixtures' Triton kernels, interpreted on the host
        os.environ.setdefault("TRITON_INTERPRET", "1")
    policy = Policy(time=not args.device.startswith("cpu"), trials=2, timeout_s=60)
    print(f"device {args.device}, backend {args.backend}, {args.actors} actor(s)/slot(s), "
          f"group {args.group}, cpus {os.cpu_count()}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        if not args.skip_compare:
            rows = submissions(args.n, "cmp")
            d = direct(args, folder, rows, policy)
            s = through_service(args, folder, rows, policy)
            print(f"\n{'path':10s} {'n':>5s} {'wall s':>8s} {'subs/s':>8s} {'wrong':>6s} "
                  f"{'p50 s':>7s} {'p95 s':>7s}")
            print(f"{'direct':10s} {args.n:5d} {d['wall']:8.2f} {args.n / d['wall']:8.2f} "
                  f"{d['wrong']:6d} {'-':>7s} {'-':>7s}   (mean per group {d['per_group']:.2f}s)")
            print(f"{'service':10s} {args.n:5d} {s['wall']:8.2f} {args.n / s['wall']:8.2f} "
                  f"{s['wrong']:6d} {s['p50']:7.2f} {s['p95']:7.2f}")
            print(f"service / direct throughput: {d['wall'] / s['wall']:.1%}", flush=True)
        if args.per_sample:
            print(f"\nper-sample requests: {args.per_sample} of one problem at once")
            for label, group in (("alone", 1), (f"joined ({args.group})", args.group)):
                r = per_sample(args, folder, policy, group, label.split()[0])
                print(f"  {label:14s} wall {r['wall']:7.2f} s  {args.per_sample / r['wall'] * 60:6.1f}"
                      f"/min  wrong {r['wrong']}  joined {r['joined']}", flush=True)
        if not args.skip_load:
            r = load(args, folder, policy)
            print(f"\nload: {r['jobs']} jobs from {args.clients} clients in {r['wall']:.1f}s "
                  f"({r['jobs'] / r['wall']:.1f}/s): unanswered {r['unanswered']}, service "
                  f"errors {r['errors']}, wrong {r['wrong']}, distinct ids {r['ids']}, "
                  f"answered (metrics) {r['answered']}, late results {r['late']}, "
                  f"429s waited out {r['refused']}")
            ok = r["unanswered"] == r["errors"] == r["wrong"] == r["late"] == 0 and \
                r["ids"] == r["jobs"] == r["answered"]
            print("load: every job answered once and right" if ok else "load: FAILED")
            return 0 if ok else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
