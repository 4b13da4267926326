"""``kernelmill grade``: one candidate against one reference, or a batch file of submissions.

    kernelmill grade --reference REF.py --candidate CAND.py [--device auto|cpu|cuda] [--json]
    kernelmill grade PROBLEMS SUBMISSIONS.jsonl --out V.jsonl [--split eval] [--workers N]

PROBLEMS is a records file (``id``/``source``), a JSONL of published dataset rows
(``problem_id``/``reference``), a dataset folder from ``kernelmill publish``, one of its parquet
files, or a Hub dataset id (``grade/problems.py``); ``--split`` keeps one split of a dataset.
On CPU every reference is graded at the size validation calibrated it at (``grade/size.py``).

Exit status: 0 when every submission got a verdict, whatever the verdicts say; 2 when grading could
not be done (bad input, a reference that does not run in a single grade) or a submission row
could not be read (it has no verdict; the others' are written), before 1; 1 with ``--fail-on
hacked`` when a verdict flags a hack, or with ``--fail-on incorrect`` when one is not correct
(hacked ones included). A single grade shows a progress line while its workers run; the batch
form is resumable and prints the stage counts.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
import threading
import time
from pathlib import Path

from kernelmill.core.errors import KernelmillError

from .policy import PRESETS, Policy
from .outcome import failed_checks, reason
from .rewards import REWARDS

JSON_FIELDS = ("compiled", "correct", "hacks", "reward", "speedup_vs_eager",
               "speedup_vs_inductor", "error")


def _policy(args: argparse.Namespace) -> Policy:
    policy = Policy(preset=args.policy, trials=args.trials, max_torch_ops=args.max_torch_ops,
                    time=not args.no_time,
                    timeout_s=args.timeout, atol=args.atol, rtol=args.rtol,
                    sandbox=not args.no_sandbox, static_first=not args.run_flagged)
    if args.inductor is not None:
        policy.inductor = args.inductor == "on"
    return policy


def _flagged(out_path: str, fail_on: str) -> int:
    """How many verdicts of the batch (this run's and earlier runs') ``--fail-on`` counts."""
    if fail_on == "never":
        return 0
    from kernelmill.core.store import read_jsonl

    verdicts = list(read_jsonl(out_path, on_error=lambda _m: None))
    if fail_on == "hacked":
        return sum(1 for v in verdicts if v.get("hacks"))
    return sum(1 for v in verdicts if not v.get("correct"))


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise KernelmillError(f"{path}: cannot read: {exc}") from None


def _cmd_grade(args: argparse.Namespace) -> int:
    problems = args.problems or args.problems_pos
    submissions = args.submissions or args.submissions_pos
    if problems or submissions:
        if not (problems and submissions and args.out):
            raise KernelmillError("batch grading needs --problems, --submissions and --out")
        from .batch import batch_summary, grade_file, unread_rows

        stats = grade_file(problems, submissions, args.out, device=args.device,
                           workers=args.workers, backend=args.backend, address=args.address,
                           reward=args.reward, policy=_policy(args),
                           cache_path=not args.no_cache, split=args.split,
                           processes=args.processes)
        print(batch_summary(stats))
        _say_downgrades(_row_downgrades(args.out))
        flagged = _flagged(args.out, args.fail_on)
        if flagged:
            print(f"grade: {flagged} submission(s) {args.fail_on} (--fail-on {args.fail_on})")
        unread = unread_rows(stats)
        if unread:
            print(f"grade: {unread} submission row(s) got no verdict (not a JSON object, or "
                  f"lacking submission_id, problem_id or source: the warnings name their lines); "
                  f"the other verdicts are in {args.out}")
            return 2
        return 1 if flagged else 0
    if not (args.reference and args.candidate):
        raise KernelmillError("give --reference and --candidate (or --problems, --submissions "
                              "and --out for a batch)")
    from kernelmill.core.problem import check_source

    from .grader import Grader, ReferenceError

    reference = _read(args.reference)
    check_source(reference, args.reference)
    candidate = _read(args.candidate)
    grader = Grader(args.device, policy=_policy(args), guard_paths=[args.reference])
    try:
        with working(f"grading {args.candidate} against {args.reference} on {grader.device}"):
            verdict = grader.grade(reference, candidate, reward=args.reward)
    except ReferenceError as exc:
        raise KernelmillError(f"{args.reference}: {exc}") from None
    if args.json:
        out = {k: verdict.get(k) for k in JSON_FIELDS}
        out.update(reason=reason(verdict), failed_checks=failed_checks(verdict))
        out.update({k: v for k, v in verdict.items() if k not in out and k != "checks"})
        print(json.dumps(out, default=str))
    else:
        print(_describe(verdict))
    _say_downgrades(verdict.get("downgrades") or [])
    if (args.fail_on == "hacked" and verdict.get("hacks")) or \
            (args.fail_on == "incorrect" and not verdict.get("correct")):
        return 1
    return 0


def _row_downgrades(out_path: str) -> list[str]:
    from kernelmill.core.store import read_jsonl

    seen: dict[str, None] = {}
    for row in read_jsonl(out_path, on_error=lambda _m: None):
        for line in row.get("downgrades") or []:
            seen.setdefault(line)
    return list(seen)


def _say_downgrades(lines: list[str]) -> None:
    """Once per command: the confinement the workers could not apply on this machine."""
    if lines:
        print(f"kernelmill: sandbox downgraded here: {'; '.join(lines)}", file=sys.stderr)


@contextlib.contextmanager
def working(what: str, every_s: float = 10.0):
    """A spinner on a terminal, else a line every ``every_s`` seconds, while a grade runs."""
    if sys.stderr.isatty():
        from kernelmill.core.progress import console

        with console.status(what + " ..."):
            yield
        return
    start = time.monotonic()
    print(f"kernelmill: {what} ...", file=sys.stderr, flush=True)
    done = threading.Event()

    def beat() -> None:
        while not done.wait(every_s):
            print(f"kernelmill: still grading ({time.monotonic() - start:.0f}s)",
                  file=sys.stderr, flush=True)

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def _fmt(x) -> str:
    return "-" if x is None else f"{x:.3g}"


def _describe(v: dict) -> str:
    lines = [f"compiled: {v['compiled']}   correct: {v['correct']}   reward: {v['reward']:.3f}",
             f"speedup vs eager: {_fmt(v.get('speedup_vs_eager'))}   vs torch.compile: "
             f"{_fmt(v.get('speedup_vs_inductor'))}"]
    for code in v.get("hacks") or []:
        lines.append(f"hack {code}: {v.get('hack_details', {}).get(code, '')}")
    if v.get("error"):
        lines.append(f"error in {v['error'].get('stage')}: {v['error'].get('message')}")
    if (v.get("timings") or {}).get("skipped"):
        lines.append(f"timing: skipped ({v['timings']['skipped']})")
    for name, check in (v.get("checks") or {}).items():
        if not check.get("passed"):
            lines.append(f"check {name}: {check.get('detail')}")
    return "\n".join(lines)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "grade", help="grade kernel submissions against reference problems",
        description="Grade one candidate (--reference/--candidate) or a batch (PROBLEMS "
                    "SUBMISSIONS --out V.jsonl). Verdicts: compiled, correct, hacks, reward, "
                    "speedups. Exit status 0 when every verdict was reached, 2 when grading could "
                    "not be done or a submission row could not be read (before 1), 1 with "
                    "--fail-on when a verdict was hacked/incorrect. A batch to try: "
                    "docs/examples/problems.jsonl "
                    "docs/examples/submissions.jsonl.")
    p.add_argument("problems_pos", nargs="?", metavar="PROBLEMS",
                   help="batch: the problems, as --problems")
    p.add_argument("submissions_pos", nargs="?", metavar="SUBMISSIONS",
                   help="batch: the submissions, as --submissions")
    p.add_argument("--reference", help="reference problem file (KernelBench format)")
    p.add_argument("--candidate", help="candidate file defining ModelNew")
    p.add_argument("--problems", help="batch: problem records (JSONL with id, source), "
                   "published dataset rows (problem_id, reference), a dataset folder, a parquet "
                   "file or a Hub dataset id")
    p.add_argument("--split", help="batch: grade against this split of a dataset only "
                   "(default: every split)")
    p.add_argument("--submissions", help="batch: rows with submission_id, problem_id, source")
    p.add_argument("--out", help="batch: verdicts file (JSONL; rerun to resume)")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N (default auto)")
    p.add_argument("--json", action="store_true", help="print the verdict as one JSON line")
    p.add_argument("--fail-on", choices=("never", "hacked", "incorrect"), default="never",
                   help="exit 1 when a verdict is flagged for a hack (hacked) or is not correct "
                   "(incorrect); default never: exit 0 whenever every verdict was reached")
    p.add_argument("--reward", choices=sorted(REWARDS), default="composite",
                   help="the reward a verdict carries (grade/rewards.py): composite (default; "
                   "0.5 built, +1 correct, + the eager speedup up to 3), makora (a sigmoid of "
                   "correctness and the Inductor speedup) or staged (a ladder of the stages "
                   "reached, + the speedup); any hack gives 0")
    p.add_argument("--policy", choices=PRESETS, default="library",
                   help="strict: no library compute in forward; library (default): vendor GEMM, "
                   "convolution and attention allowed where the reference does that kind of work "
                   "(unless it is only that); "
                   "kernelbench: any PyTorch op, the candidate's kernels >= 30%% of GPU time")
    p.add_argument("--trials", type=int, default=Policy.trials,
                   help=f"fresh-input trials (default {Policy.trials})")
    p.add_argument("--max-torch-ops", type=int, default=0,
                   help="PyTorch compute ops allowed per forward (default 0)")
    p.add_argument("--atol", type=float, help="absolute tolerance (default: record, else dtype)")
    p.add_argument("--rtol", type=float, help="relative tolerance (default: record, else dtype)")
    p.add_argument("--no-time", action="store_true", help="skip timing (correctness only)")
    p.add_argument("--inductor", choices=("on", "off"), help="time torch.compile of the "
                   "reference (default: on for CUDA)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per worker run")
    p.add_argument("--workers", type=int, help="batch: parallel slots (default on CUDA: one per "
                   "core of a GPU's share, at most 16 per GPU; "
                   "admitted on its memory)")
    p.add_argument("--processes", type=int, help="batch: grading processes the slots are "
                   "shared among (default one: the slots are its threads)")
    p.add_argument("--backend", choices=("local", "ray"), default="local")
    p.add_argument("--address", help="ray cluster address")
    p.add_argument("--no-cache", action="store_true", help="batch: ignore the verdict cache")
    p.add_argument("--no-sandbox", action="store_true", help="do not confine workers with "
                   "Landlock (debugging only: submissions can then write files)")
    p.add_argument("--run-flagged", action="store_true", help="run a submission the static "
                   "scan flags too (by default its verdict, hacked, is given without running it)")
    p.set_defaults(func=_cmd_grade)

