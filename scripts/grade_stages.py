"""Where one grade's time goes on this machine: each worker run's stages, parent clock.

    python scripts/grade_stages.py [--device cuda] [--only NAME ...] [--group N]

With ``--group N``: N copies of each answer graded as one group (``Grader.grade_group``), twice;
each member's reference and candidate seconds, its worker's stages and the window's waits.
"""
import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from grade_fidelity import SET, problem_source
from kernelmill.grade import grader as grader_module
from kernelmill.grade import reference_run
from kernelmill.grade.grader import Grader
from kernelmill.grade.policy import Policy

parser = argparse.ArgumentParser()
parser.add_argument("--device", default="cuda")
parser.add_argument("--only", nargs="*", default=["scale_add_1m", "matmul_fp16_2k"])
parser.add_argument("--group", type=int, default=0)
args = parser.parse_args()
original = grader_module.run_in_worker


def logged(target, payload, **kwargs):
    result = original(target, payload, **kwargs)
    marks = " ".join(f"{name}@{at:.2f}" for name, at in result.stages)
    print(f"    {target.split(':')[1]:24s} wall {result.wall_s:6.2f}s warm={result.warm} {marks}",
          flush=True)
    return result


grader = Grader(args.device, policy=Policy(timeout_s=180))
for name, answer, sizes in SET:
    if name not in args.only or not args.group:
        continue
    for attempt in range(2):
        began = time.monotonic()
        verdicts = grader.grade_group(problem_source(answer, sizes),
                                      [answer.read_text()] * args.group)
        print(f"{name} group of {args.group} #{attempt}: {time.monotonic() - began:.2f}s "
              f"correct {sum(v['correct'] for v in verdicts)}", flush=True)
        for v in verdicts:
            prof = dict(v.get("profile") or {})
            stages = prof.pop("stages_s", {})
            print(f"    {prof} speedup={v.get('speedup_vs_eager')}\n      stages {stages}",
                  flush=True)
if args.group:
    sys.exit(0)
grader_module.run_in_worker = logged
reference_run.run_in_worker = logged  # the reference's workers
for name, answer, sizes in SET:
    if name not in args.only:
        continue
    for attempt in range(2):
        began = time.monotonic()
        verdict = grader.grade(problem_source(answer, sizes), answer.read_text())
        print(f"{name} #{attempt}: {time.monotonic() - began:.2f}s correct={verdict['correct']} "
              f"profile={verdict.get('profile')} timing={verdict.get('timing')}", flush=True)
