"""Where a run's host CPU went, from py-spy's collapsed stacks (``py-spy record -f raw
--subprocesses``, idle threads left out, as ``scripts/gpu_check.sh`` takes them with
``GRADE_PYSPY``): CPU seconds per kind of process, and per kind the functions holding the most
samples, inclusive (``--frames``) and where they ran (self).

    python scripts/pyspy_summary.py grade_pyspy.txt --rate 25 [--top 25] [--subs 96]
"""
from __future__ import annotations

import argparse
import re
from collections import Counter, defaultdict
from pathlib import Path

# py-spy's root frames, one per process from the sampled one's ancestors down to it: a quoted
# command line, which may hold newlines and semicolons itself
PROCESS = re.compile(r'process \d+:"(?P<cmd>.*?)";', re.DOTALL)
RECORD = re.compile(r"(?P<stack>.*?) (?P<count>\d+)\n", re.DOTALL)


TASKS = ("candidate_task", "reference_task", "reference_timing_task", "compile_task")


def kind_of(cmd: str) -> str:
    """A process's kind from its command line (py-spy gives the process it started none)."""
    if not cmd:
        return "the command run"
    for word in ("zygote_worker", "harness_worker", "grade_throughput", "compile", "ptxas"):
        if word in cmd:
            return word
    return cmd.split()[0] if cmd.split() else "?"


def frame_name(frame: str) -> str:
    return re.sub(r":\d+\)$", ")", frame.strip())  # the function, not the line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("raw")
    parser.add_argument("--rate", type=float, default=25.0, help="samples per second taken")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--subs", type=int, help="submissions in the run: seconds per one too")
    args = parser.parse_args()
    per_kind: Counter = Counter()
    inclusive: dict[str, Counter] = defaultdict(Counter)
    own: dict[str, Counter] = defaultdict(Counter)
    text = Path(args.raw).read_text(encoding="utf-8", errors="replace")
    for record in RECORD.finditer(text):
        stack, n = record.group("stack"), int(record.group("count"))
        commands = PROCESS.findall(stack)
        kind = kind_of(commands[-1]) if commands else "?"
        frames = PROCESS.sub("", stack).split(";")
        body = [frame_name(f) for f in frames if f and not f.startswith("thread ")]
        # forked workers share their zygote's command line: told apart by the task they run
        task = next((f.split(" ")[0] for f in body if f.split(" ")[0] in TASKS), None)
        kind = f"{kind}:{task}" if task else kind
        per_kind[kind] += n
        for name in set(body):
            inclusive[kind][name] += n
        if body:
            own[kind][body[-1]] += n
    scale = 1.0 / args.rate
    per = f" per submission (of {args.subs})" if args.subs else ""
    print(f"CPU seconds by kind of process{per}:")
    for kind, n in per_kind.most_common():
        seconds = n * scale / (args.subs or 1)
        print(f"  {kind:<24} {seconds:9.2f}")
    for kind, n in per_kind.most_common(6):
        print(f"\n== {kind}: {n * scale:.1f} CPU s; functions by inclusive samples")
        for name, k in inclusive[kind].most_common(args.top):
            print(f"  {100 * k / n:5.1f}%  {name[:150]}")
        print(f"-- {kind}: where the samples ran (self)")
        for name, k in own[kind].most_common(args.top):
            print(f"  {100 * k / n:5.1f}%  {name[:150]}")


if __name__ == "__main__":
    main()
