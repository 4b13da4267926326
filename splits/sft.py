"""Supervised fine-tuning pairs from graded submissions (``kernelmill export --format sft``).

One JSON line per verified kernel: the problem source, the optional reasoning that came with the
submission, the kernel source and its measured speedups, plus a ``messages`` list (user prompt,
assistant answer) that chat SFT trainers take as is. Only verdicts with ``correct`` true and no
``hacks`` are used; a kernel whose source repeats one already exported for the same problem is
skipped. Rows are ordered by problem id, then by speedup over eager (fastest first).

Inputs: the problems' records file, a verdicts file (rows with at least ``submission_id``,
``problem_id``, ``correct``, ``hacks``, ``speedup_vs_eager``, ``speedup_vs_inductor``) and the
submissions file they refer to (``submission_id``, ``problem_id``, ``source``, optional
``reasoning``).
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from kernelmill.core.canonical import content_hash
from kernelmill.core.errors import KernelmillError
from kernelmill.core.stats import StageStats
from kernelmill.core.store import JsonlWriter, read_jsonl, read_records

PROMPT = ("Write a faster implementation of the PyTorch program below as a class `ModelNew` with "
          "the same constructor and forward signature (custom CUDA or Triton kernels welcome). "
          "Answer with the complete Python source.\n\n```python\n{source}\n```")


def _speed(value: Any) -> float | None:
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None


def sft_pairs(records_path: str | Path, verdicts_path: str | Path,
              submissions_path: str | Path, stats: StageStats | None = None) -> list[dict]:
    """The SFT rows (see the module docstring)."""
    stats = stats or StageStats("export-sft")
    problems = {r.id: r for r in read_records(records_path)}
    submissions: dict[str, dict] = {}
    for row in read_jsonl(submissions_path):
        if "submission_id" in row:
            submissions[str(row["submission_id"])] = row
    pairs: list[dict] = []
    seen: set[tuple[str, str]] = set()
    for verdict in read_jsonl(verdicts_path):
        if verdict.get("correct") is not True:
            stats.dropped("incorrect")
            continue
        if verdict.get("hacks"):
            stats.dropped("hack detected")
            continue
        submission = submissions.get(str(verdict.get("submission_id")))
        if submission is None or not isinstance(submission.get("source"), str):
            stats.dropped("submission not found")
            continue
        problem_id = str(verdict.get("problem_id") or submission.get("problem_id"))
        problem = problems.get(problem_id)
        if problem is None:
            stats.dropped("problem not found")
            continue
        kernel = submission["source"]
        key = (problem_id, content_hash(kernel.strip()))
        if key in seen:
            stats.dropped("duplicate kernel")
            continue
        seen.add(key)
        reasoning = submission.get("reasoning") or None
        answer = f"```python\n{kernel.rstrip()}\n```"
        if reasoning:
            answer = f"{reasoning.strip()}\n\n{answer}"
        pairs.append({
            "submission_id": str(verdict["submission_id"]),
            "problem_id": problem_id,
            "name": problem.name,
            "category": problem.category,
            "level": problem.level,
            "problem": problem.source,
            "reasoning": reasoning,
            "kernel": kernel,
            "speedup_vs_eager": _speed(verdict.get("speedup_vs_eager")),
            "speedup_vs_inductor": _speed(verdict.get("speedup_vs_inductor")),
            "messages": [{"role": "user", "content": PROMPT.format(source=problem.source.rstrip())},
                         {"role": "assistant", "content": answer}],
        })
    pairs.sort(key=lambda p: (p["problem_id"], -(p["speedup_vs_eager"] or 0.0),
                              p["submission_id"]))
    return pairs


def export_sft(records_path: str | Path, verdicts_path: str | Path,
               submissions_path: str | Path, out_path: str | Path) -> StageStats:
    start = time.perf_counter()
    stats = StageStats("export-sft")
    pairs = sft_pairs(records_path, verdicts_path, submissions_path, stats)
    with JsonlWriter(out_path, key="submission_id", resume=False) as writer:
        for pair in pairs:
            writer.write(pair)
            stats.kept()
    stats.seconds = time.perf_counter() - start
    return stats


def export_sft_command(args: argparse.Namespace) -> int:
    if not args.verdicts or not args.submissions:
        raise KernelmillError("--format sft needs --verdicts FILE and --submissions FILE")
    stats = export_sft(args.records, args.verdicts, args.submissions, args.out)
    print(f"exported {stats.n_kept} SFT pair(s) to {args.out}; " + stats.summary())
    return 0
