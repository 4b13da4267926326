"""Where one grade's time goes on this machine: each worker run's stages, parent clock.

    python scripts/grade_stages.py [--device cuda] [--only NAME ...]
"""
import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from grade_fidelity import SET, problem_source
from kernelmill.grade import grader as grader_module
from kernelmill.grade.grader import Grader
from kernelmill.grade.policy import Policy

parser = argparse.ArgumentParser()
parser.add_argument("--device", default="cuda")
parser.add_argument("--only", nargs="*", default=["scale_add_1m", "matmul_fp16_2k"])
args = parser.parse_args()
original = grader_module.run_in_worker


def logged(target, payload, **kwargs):
    result = original(target, payload, **kwargs)
    marks = " ".join(f"{name}@{at:.2f}" for name, at in result.stages)
    print(f"    {target.split(':')[1]:24s} wall {result.wall_s:6.2f}s warm={result.warm} {marks}",
          flush=True)
    return result


grader_module.run_in_worker = logged
grader = Grader(args.device, policy=Policy(timeout_s=180))
for name, answer, sizes in SET:
    if name not in args.only:
        continue
    for attempt in range(2):
        began = time.monotonic()
        verdict = grader.grade(problem_source(answer, sizes), answer.read_text())
        print(f"{name} #{attempt}: {time.monotonic() - began:.2f}s correct={verdict['correct']} "
              f"profile={verdict.get('profile')} timing={verdict.get('timing')}", flush=True)
