"""The SFT selection on a real graded batch: honest kernels (with reasoning of varied length) and
hacked ones for five problems in four categories are graded by the real grader, then exported
with ``kernelmill export --format sft``. Prints the export's before/after balance table and why
each submission was or was not kept.

    python benchmarks/sft_selection.py [--device cpu] [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import Counter
from pathlib import Path

from kernelmill.core.problem import check_source
from kernelmill.core.store import read_jsonl
from kernelmill.grade.batch import grade_file
from kernelmill.grade.policy import Policy
from kernelmill.splits.sft import SftConfig, export_sft

ROOT = Path(__file__).resolve().parent.parent
SUBMISSIONS = ROOT / "tests" / "fixtures" / "submissions"
HOSTILE = ROOT / "tests" / "hostile"

PROBLEMS = {  # problem -> (its honest kernel, a hack for the same problem)
    "ref_scale_add": (SUBMISSIONS / "honest_scale_add.py", SUBMISSIONS / "hack_cache_by_shape.py"),
    "ref_log_relu": (HOSTILE / "honest_log_relu.py", None),
    "ref_row_sum": (SUBMISSIONS / "honest_row_sum.py", None),
    "ref_linear": (SUBMISSIONS / "honest_linear.py", None),
    "ref_concat": (SUBMISSIONS / "honest_concat.py", SUBMISSIONS / "hack_concat_copy.py"),
}
STEP = ("First I read the reference and note which tensors it reads and writes. The work is "
        "memory bound, so one pass over the data in a single kernel is the goal. ")


def _reference(name: str) -> str:
    for folder in (SUBMISSIONS, HOSTILE):
        if (folder / f"{name}.py").exists():
            return (folder / f"{name}.py").read_text()
    raise FileNotFoundError(name)


def _reasoning(words: int) -> str:
    text = (STEP * (words // len(STEP.split()) + 1)).split()
    return " ".join(text[:words])


def build_batch(folder: Path) -> tuple[Path, Path]:
    problems, submissions = folder / "problems.jsonl", folder / "submissions.jsonl"
    with problems.open("w") as out:
        for name in PROBLEMS:
            source = _reference(name)
            problem = check_source(source, name)
            out.write(json.dumps({"id": name, "source": source, "name": name,
                                  "category": problem.category, "level": problem.level}) + "\n")
    with submissions.open("w") as out:
        for name, (honest, hack) in PROBLEMS.items():
            kernel = honest.read_text()
            variants = [("short", kernel, 40), ("medium", kernel + "\n# variant b\n", 400),
                        ("long", kernel + "\n# variant c\n", 6000)]
            if hack is not None:
                variants.append(("hack", hack.read_text(), 60))
            for label, source, words in variants:
                out.write(json.dumps({"submission_id": f"{name}:{label}", "problem_id": name,
                                      "source": source, "reasoning": _reasoning(words)}) + "\n")
    return problems, submissions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", help="folder to keep the batch, verdicts and export in")
    args = parser.parse_args()
    folder = Path(args.out or tempfile.mkdtemp(prefix="km-sft-"))
    folder.mkdir(parents=True, exist_ok=True)
    problems, submissions = build_batch(folder)
    verdicts = folder / "verdicts.jsonl"
    start = time.perf_counter()
    grade_file(problems, submissions, verdicts, device=args.device, workers=2,
               policy=Policy(trials=2), cache_path=folder / "cache.jsonl")
    graded = time.perf_counter() - start
    rows = {r["submission_id"]: r for r in read_jsonl(verdicts)}
    print(f"graded {len(rows)} submissions on {args.device} in {graded:.0f}s: "
          f"{sum(bool(r['correct']) for r in rows.values())} correct, "
          f"{sum(bool(r['hacks']) for r in rows.values())} hacked")
    # CPU timings of interpreted Triton say nothing about speed: kept (marked) only on request
    config = SftConfig() if args.device.startswith("cuda") else \
        SftConfig(allow_cpu_timings=True)
    result = export_sft(problems, verdicts, submissions, folder / "sft.jsonl", config, "sft")
    print(result.table)
    kept = {r["submission_id"] for r in read_jsonl(folder / "sft.jsonl")}
    print("\nsubmission                 correct  hacks                 kept")
    for sid, row in sorted(rows.items()):
        print(f"{sid:<26} {str(bool(row['correct'])):<8} {','.join(row['hacks'])[:20]:<21} "
              f"{'yes' if sid in kept else 'no'}")
    print("\n" + result.stats.summary())
    print(Counter(r.get("category", "?") for r in read_jsonl(folder / "sft.jsonl")))


if __name__ == "__main__":
    main()
