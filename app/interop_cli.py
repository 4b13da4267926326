"""``kernelmill export``: records as a KernelBench tree, or verified SFT pairs (``kernelmill import``
is the import stage, declared in ``kernelmill.core.interop``)."""
from __future__ import annotations

import argparse

from kernelmill.core.interop import export_kernelbench
from kernelmill.splits.sft import add_sft_arguments, export_sft_command


def _cmd_export(args: argparse.Namespace) -> int:
    if args.format == "kernelbench":
        counts = export_kernelbench(args.records, args.out)
        total = sum(counts.values())
        levels = ", ".join(f"level{k}: {v}" for k, v in sorted(counts.items()))
        print(f"exported {total} problem(s) to {args.out} ({levels or 'none'})")
        return 0
    return export_sft_command(args)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("export", help="write records as a KernelBench tree or SFT pairs",
                              description="kernelbench: write levelN/ID_Name.py files. sft: write "
                              "verified (problem, kernel) pairs from a verdicts file.")
    p.add_argument("records", help="records file (JSONL)")
    p.add_argument("--out", required=True, help="output folder (kernelbench) or file (sft)")
    p.add_argument("--format", choices=("kernelbench", "sft", "difficulty"), default="kernelbench",
                   help="kernelbench tree, selected SFT pairs, or the per-problem mean reasoning "
                   "length of verified kernels (difficulty)")
    p.add_argument("--verdicts", help="sft: verdicts file of graded submissions")
    p.add_argument("--submissions", help="sft: submissions file the verdicts refer to")
    add_sft_arguments(p)
    p.set_defaults(func=_cmd_export)
