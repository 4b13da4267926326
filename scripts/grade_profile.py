"""Where a large grade's time goes inside its workers: the reference and candidate tasks run in
this process under cProfile (no sandbox), then through real workers with the parent's own
costs (reading results, sending payloads) timed.

    python scripts/grade_profile.py [--device cuda] [--only NAME ...] [--top N]
"""
import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from grade_fidelity import SET, problem_source
from kernelmill.grade import grader as grader_module
from kernelmill.grade import reference_run, worker
from kernelmill.grade.grader import Grader
from kernelmill.grade.policy import Policy

parser = argparse.ArgumentParser()
parser.add_argument("--device", default="cuda")
parser.add_argument("--only", nargs="*", default=["scale_add_16m", "matmul_fp16_4k"])
parser.add_argument("--top", type=int, default=22)
args = parser.parse_args()


def profiled(label: str, fn):
    profile = cProfile.Profile()
    began = time.monotonic()
    value = profile.runcall(fn)
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(args.top)
    lines = [line for line in text.getvalue().splitlines() if line.strip()][4:]
    print(f"== {label}: {time.monotonic() - began:.2f}s in process", flush=True)
    print("\n".join(lines), flush=True)
    return value


def timed_worker_runs(grader: Grader, source: str, answer: str) -> None:
    """The same grade through real workers: each run's stages, and the parent's reading."""
    original = grader_module.run_in_worker

    def logged(target, payload, **kwargs):
        began = time.monotonic()
        result = original(target, payload, **kwargs)
        marks = " ".join(f"{name}@{at:.2f}" for name, at in result.stages)
        print(f"    {target.split(':')[1]:24s} parent {time.monotonic() - began:6.2f}s "
              f"worker {result.wall_s:6.2f}s {marks}", flush=True)
        return result

    grader_module.run_in_worker = logged
    reference_run.run_in_worker = logged  # the reference's workers
    try:
        for attempt in range(2):
            began = time.monotonic()
            verdict = grader.grade(source, answer)
            print(f"  grade #{attempt}: {time.monotonic() - began:.2f}s correct="
                  f"{verdict['correct']} profile={verdict.get('profile')}", flush=True)
    finally:
        grader_module.run_in_worker = original
        reference_run.run_in_worker = original


grader = Grader(args.device, policy=Policy(timeout_s=300))
quiet = Grader(args.device, policy=Policy(timeout_s=300, sandbox=False))
device = grader.worker_device
for name, answer_path, sizes in SET:
    if name not in args.only:
        continue
    source, answer = problem_source(answer_path, sizes), answer_path.read_text()
    print(f"# {name}", flush=True)
    timed_worker_runs(grader, source, answer)
    reference = quiet.fresh_reference(source)  # the timing cache is warm now
    job = quiet._prepare(reference, answer, None, None)
    payload = {**job["payload"], "time": False}
    ref_payload = {"source": source, "device": device, "init_seed": 1, "time": False,
                   "inductor": False, "timing_settings": {}, "lock": None,
                   "trials": [{"seed": 10 + i, "dist": ("natural", "affine")[i % 2],
                               "hidden": i >= 3} for i in range(5)]}
    profiled(f"{name} reference_task", lambda: worker.reference_task(ref_payload))
    profiled(f"{name} candidate_task (untimed)", lambda: worker.candidate_task(payload))
