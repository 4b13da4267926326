"""``kernelmill export``: problems as a KernelBench tree, verified SFT pairs or verl's RL parquet
(``splits.verl``); ``kernelmill
show``: one problem's reference source, e.g. as the ``problem.py`` of ``grade --reference``
(``kernelmill import`` is the import stage, declared in ``kernelmill.core.interop``).

Both read problems in every form ``kernelmill grade`` takes (``grade.problems``): a records file,
a dataset folder written by ``kernelmill publish``, one of its parquet files, a Hub dataset id
or a JSONL file of published rows.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kernelmill.core.errors import KernelmillError
from kernelmill.core.interop import write_kernelbench
from kernelmill.grade.problems import load_problems
from kernelmill.splits.sft import add_sft_arguments, export_sft_command

PROBLEMS_HELP = ("problems: a records file (JSONL), a dataset folder from `kernelmill publish`, "
                 "one of its parquet files, a Hub dataset id (ORG/NAME) or a JSONL file of "
                 "published rows")


def _problems(spec: str, split: str | None) -> dict[str, dict]:
    problems = load_problems(spec, split)
    if not problems:
        raise KernelmillError(f"{spec}: no problems (rows need id and source, or problem_id "
                              "and reference)")
    return problems


def _cmd_export(args: argparse.Namespace) -> int:
    if args.format == "kernelbench":
        counts = write_kernelbench(_problems(args.records, args.split).values(), args.out)
        total = sum(counts.values())
        levels = ", ".join(f"level{k}: {v}" for k, v in sorted(counts.items()))
        print(f"exported {total} problem(s) to {args.out} ({levels or 'none'})")
        return 0
    if args.format == "verl":
        from kernelmill.splits.verl import write_verl

        count = write_verl(_problems(args.records, args.split), args.out, args.prompt_backend,
                           args.split)
        print(f"exported {count} problem(s) to {args.out} (verl parquet)")
        return 0
    return export_sft_command(args)


def find_problem(problems: dict[str, dict], row_id: str) -> dict:
    """The problem ``row_id`` names: its id, a unique prefix of it, or its unique name."""
    if row_id in problems:
        return problems[row_id]
    matches = [p for pid, p in problems.items() if pid.startswith(row_id)] or \
        [p for p in problems.values() if p.get("name") == row_id]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise KernelmillError(f"{row_id!r} names {len(matches)} problems: "
                              + ", ".join(sorted(str(p["id"]) for p in matches)[:5]))
    raise KernelmillError(f"no problem {row_id!r} among {len(problems)} (give its problem_id, "
                          "a prefix of it, or its name)")


def _cmd_show(args: argparse.Namespace) -> int:
    problem = find_problem(_problems(args.problems, args.split), args.row_id)
    source = str(problem["source"])
    source = source if source.endswith("\n") else source + "\n"
    if args.out in (None, "-"):
        sys.stdout.write(source)
        return 0
    Path(args.out).write_text(source, encoding="utf-8")
    print(f"wrote {problem['id']} ({problem.get('name') or 'unnamed'}) to {args.out}; grade an "
          f"answer with: kernelmill grade --reference {args.out} --candidate kernel.py",
          file=sys.stderr)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("export", help="write problems as a KernelBench tree, SFT pairs "
                              "or verl's RL parquet",
                              description="kernelbench: write levelN/ID_Name.py files. sft: write "
                              "verified (problem, kernel) pairs from a verdicts file. verl: write "
                              "verl's RL parquet (data_source, prompt, ability, reward_model, "
                              "extra_info). "
                              + PROBLEMS_HELP[0].upper() + PROBLEMS_HELP[1:] + ".")
    p.add_argument("records", metavar="PROBLEMS", help=PROBLEMS_HELP)
    p.add_argument("--out", required=True, help="output folder (kernelbench) or file (sft, verl)")
    p.add_argument("--split", help="only this split of a dataset folder or Hub dataset")
    p.add_argument("--format", choices=("kernelbench", "sft", "difficulty", "verl"),
                   default="kernelbench",
                   help="kernelbench tree, selected SFT pairs, the per-problem mean reasoning "
                   "length of verified kernels (difficulty), or verl's RL parquet (verl)")
    p.add_argument("--prompt-backend", choices=("triton", "cuda"), default="triton",
                   help="verl: the kernel language the prompt asks for (default triton)")
    p.add_argument("--verdicts", help="sft: verdicts file of graded submissions")
    p.add_argument("--submissions", help="sft: submissions file the verdicts refer to")
    add_sft_arguments(p)
    p.set_defaults(func=_cmd_export)

    s = subparsers.add_parser("show", help="write one problem's reference source (problem.py)",
                              description="Print one problem's reference source, or write it "
                              "with --out, e.g. as the problem.py of `kernelmill grade "
                              "--reference`. " + PROBLEMS_HELP[0].upper() + PROBLEMS_HELP[1:]
                              + ".")
    s.add_argument("problems", metavar="PROBLEMS", help=PROBLEMS_HELP)
    s.add_argument("row_id", metavar="ROW_ID", help="the problem's problem_id (or a unique "
                   "prefix of it, or its unique name)")
    s.add_argument("--out", help="file to write (default: standard output)")
    s.add_argument("--split", help="only this split of a dataset folder or Hub dataset")
    s.set_defaults(func=_cmd_show)
