"""``kernelmill import`` and ``kernelmill export``: KernelBench trees in and out, SFT pairs out."""
from __future__ import annotations

import argparse

from kernelmill.core.interop import export_kernelbench, import_folder
from kernelmill.splits.sft import export_sft_command


def _cmd_import(args: argparse.Namespace) -> int:
    result = import_folder(args.dir, args.out)
    for line in result.malformed:
        print(f"malformed: {line}")
    print(f"imported {result.stats.n_kept} problem(s) into {args.out}; "
          f"{len(result.malformed)} malformed; "
          f"{result.stats.counts['already present']} already present")
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    if args.format == "kernelbench":
        counts = export_kernelbench(args.records, args.out)
        total = sum(counts.values())
        levels = ", ".join(f"level{k}: {v}" for k, v in sorted(counts.items()))
        print(f"exported {total} problem(s) to {args.out} ({levels or 'none'})")
        return 0
    return export_sft_command(args)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("import", help="read a folder of KernelBench-format files into records",
                              description="Read every *.py under DIR (e.g. KernelBench/level1) into "
                              "records; malformed files are listed with the reason and skipped.")
    p.add_argument("dir", help="folder (or single file) of KernelBench-format problems")
    p.add_argument("--out", required=True, help="records file to append to (JSONL)")
    p.set_defaults(func=_cmd_import)

    p = subparsers.add_parser("export", help="write records as a KernelBench tree or SFT pairs",
                              description="kernelbench: write levelN/ID_Name.py files. sft: write "
                              "verified (problem, kernel) pairs from a verdicts file.")
    p.add_argument("records", help="records file (JSONL)")
    p.add_argument("--out", required=True, help="output folder (kernelbench) or file (sft)")
    p.add_argument("--format", choices=("kernelbench", "sft"), default="kernelbench")
    p.add_argument("--verdicts", help="sft: verdicts file of graded submissions")
    p.add_argument("--submissions", help="sft: submissions file the verdicts refer to")
    p.set_defaults(func=_cmd_export)
