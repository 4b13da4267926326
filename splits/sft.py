"""Supervised fine-tuning data from graded submissions, selected the ConCuR way.

``kernelmill export PROBLEMS --format sft --verdicts V.jsonl --submissions S.jsonl --out SFT.jsonl``
writes one JSON line per selected kernel: the problem, its reasoning, the kernel, its speedups
and a ``messages`` list in the chat format TRL's ``SFTTrainer`` takes (the same prompt as the RL
dataset's ``prompt`` column, ``splits/prompt.py``, then the assistant's reasoning and kernel).
``--format difficulty`` writes, per problem, the mean reasoning length of its verified kernels.

What makes SFT data good is selection (ConCuR / KernelCoder): concise yet informative reasoning,
fast kernels, and a balance over task types. The selection, with ``SftConfig``'s defaults:

1. *verified*: only verdicts with no ``hacks`` ("hack detected", counted apart from the
   wrong ones) and ``correct`` true ("incorrect"); a kernel repeating one already seen for the
   same problem (same content hash) counts once ("duplicate kernel");
2. *fast and trusted timings*: a kernel whose verdict was timed on CPU (``timing_device``, from
   the timing method or the verdict's ``device``) is dropped ("timed on cpu": interpreted Triton
   against eager on shared cores says nothing about speed) unless ``allow_cpu_timings``, which
   keeps it marked ``timing_device: cpu``; any other kernel slower than ``min_speedup`` times
   eager (default 1.0: at least as fast as PyTorch) is dropped ("slower than 1x eager"), and so
   is one without a time when ``min_speedup`` is set ("not timed");
3. *reasoning cap*: a kernel whose reasoning is longer than ``max_reasoning_tokens`` is dropped
   ("reasoning too long");
4. *best k per problem*: kernels ranked by speed, the speedup over Inductor where every kernel of
   the problem has one, else over eager; kernels within ``speed_margin`` of the fastest remaining
   one are equally fast, and among them the shorter reasoning goes first; the first
   ``per_problem`` are kept ("beyond best k");
5. *balance*: no category (category x level with ``balance_levels``) may hold more than
   ``max_share`` of the output (at least an equal share, 1 / number of groups); an over-full
   group loses its lowest-ranked pairs first: the k-th best of the problems with most pairs,
   slowest first ("balance: CATEGORY").

Reasoning length is counted in tokens of ``tokenizer`` (a local path or a name transformers can
load) or, without one, in whitespace-separated words. It also measures difficulty: the mean
over a problem's verified kernels (all of them, before steps 2-4) goes in every row of that
problem (``problem_reasoning_length``) and in the ``difficulty`` export, a ``problem_id ->
value`` table to merge back into the dataset.

``--split`` keeps one split of a dataset folder or Hub dataset; a name that is not there is an
error listing the splits that are.

Inputs: the problems (records, published rows or a dataset folder: ``grade.problems``), the
verdicts (``submission_id``, ``problem_id``, ``correct``, ``hacks``, ``speedup_vs_eager``,
``speedup_vs_inductor``) and the submissions (``submission_id``, ``problem_id``, ``source``,
optional ``reasoning``).
"""
from __future__ import annotations

import argparse
import math
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelmill.core.canonical import content_hash
from kernelmill.core.errors import KernelmillError
from kernelmill.core.stats import StageStats
from kernelmill.core.step import add_options, config_from_args, option
from kernelmill.core.store import JsonlWriter, read_jsonl

from .prompt import BACKENDS, prompt_messages


@dataclass
class SftConfig:
    """The selection of ``kernelmill export --format sft`` (see the module docstring)."""

    per_problem: int = option(3, "keep at most this many verified kernels per problem")
    speed_margin: float = option(0.1, "kernels within this fraction of the fastest remaining "
                                 "one are equally fast; the shorter reasoning goes first")
    max_reasoning_tokens: int = option(4096, "drop kernels whose reasoning is longer (0: no cap)")
    max_share: float = option(0.3, "no category (or category x level) may exceed this share of "
                              "the pairs (raised to 1 / number of groups when below it)")
    balance_levels: bool = option(False, "balance over category x level, not category alone")
    tokenizer: str | None = option(None, "tokenizer counting reasoning tokens (local path or "
                                   "name transformers loads); default: whitespace words")
    backend: str | None = option(None, "prompt variant (triton, cuda); default: from the kernel "
                                 "(load_inline or cpp_extension: cuda)", choices=BACKENDS)
    min_speedup: float = option(1.0, "drop kernels slower than this many times eager (verdicts "
                                "timed on a GPU; 0: keep every speed)")
    allow_cpu_timings: bool = option(False, "keep kernels whose verdicts were timed on CPU "
                                     "(marked timing_device: cpu; --min-speedup does not apply "
                                     "to them)")


def _speed(value: Any) -> float | None:
    try:
        out = None if value is None else float(value)
    except (TypeError, ValueError):
        return None
    return out if out is None or math.isfinite(out) else None


def length_counter(tokenizer: str | None) -> tuple[Callable[[str], int], str]:
    """(text -> length, the unit's name): tokens of ``tokenizer``, else whitespace words."""
    if not tokenizer:
        return (lambda text: len(text.split())), "words"
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise KernelmillError("--tokenizer needs transformers: pip install -e '.[trl]'") \
            from None
    try:
        tok = AutoTokenizer.from_pretrained(tokenizer)
    except Exception as exc:  # noqa: BLE001 — one line naming the tokenizer
        raise KernelmillError(f"--tokenizer {tokenizer}: cannot load: {exc}") from None
    return (lambda text: len(tok(text, add_special_tokens=False)["input_ids"])), \
        f"tokens ({tokenizer})"


# the device each timing method of the grader belongs to (grade.judge.METHOD_DEVICE)
_METHOD_DEVICE = {"cuda_graph": "cuda", "cuda_events": "cuda", "perf_counter": "cpu"}


def timing_device(verdict: dict) -> str:
    """Where a verdict's speedups were measured: "cuda", "cpu" or "unknown" (a hand-made row)."""
    timing = verdict.get("timing")
    method = timing.get("method") if isinstance(timing, dict) else None
    if method in _METHOD_DEVICE:
        return _METHOD_DEVICE[method]
    device = str(verdict.get("device") or "")
    if device.startswith("cuda"):
        return "cuda"
    return "cpu" if device.startswith("cpu") else "unknown"


def kernel_backend(kernel: str) -> str:
    return "cuda" if "load_inline" in kernel or "cpp_extension" in kernel else "triton"


def verified_kernels(problems: dict[str, dict], verdicts_path: str | Path,
                     submissions_path: str | Path, stats: StageStats) -> list[dict]:
    """Step 1: the verified, hack-free, distinct kernels of known problems."""
    submissions: dict[str, dict] = {}
    for row in read_jsonl(submissions_path):
        if "submission_id" in row:
            submissions[str(row["submission_id"])] = row
    found: list[dict] = []
    seen: set[tuple[str, str]] = set()
    for verdict in read_jsonl(verdicts_path):
        if verdict.get("hacks"):  # a hacked answer is not correct either: counted as hacked
            stats.dropped("hack detected")
            continue
        if verdict.get("correct") is not True:
            stats.dropped("incorrect")
            continue
        submission = submissions.get(str(verdict.get("submission_id")))
        if submission is None or not isinstance(submission.get("source"), str):
            stats.dropped("submission not found")
            continue
        problem_id = str(verdict.get("problem_id") or submission.get("problem_id"))
        if problem_id not in problems:
            stats.dropped("problem not found")
            continue
        kernel = submission["source"]
        key = (problem_id, content_hash(kernel.strip()))
        if key in seen:
            stats.dropped("duplicate kernel")
            continue
        seen.add(key)
        reasoning = submission.get("reasoning")
        found.append({"submission_id": str(verdict["submission_id"]), "problem_id": problem_id,
                      "kernel": kernel,
                      "reasoning": reasoning.strip() if isinstance(reasoning, str)
                      and reasoning.strip() else None,
                      "speedup_vs_eager": _speed(verdict.get("speedup_vs_eager")),
                      "speedup_vs_inductor": _speed(verdict.get("speedup_vs_inductor")),
                      "timing_device": timing_device(verdict)})
    return found


def fast_enough(kernel: dict, config: SftConfig, stats: StageStats) -> bool:
    """Step 2 (see the module docstring)."""
    if kernel["timing_device"] == "cpu":
        if not config.allow_cpu_timings:
            stats.dropped("timed on cpu")
        return config.allow_cpu_timings
    if not config.min_speedup:
        return True
    speed = kernel["speedup_vs_eager"]
    if speed is None:
        stats.dropped("not timed")
        return False
    if speed < config.min_speedup:
        stats.dropped(f"slower than {config.min_speedup:g}x eager")
        return False
    return True


def reasoning_difficulty(kernels: Sequence[dict]) -> dict[str, dict]:
    """Per problem: mean reasoning length over its verified kernels that carry reasoning."""
    lengths: dict[str, list[int]] = {}
    verified: Counter = Counter()
    for k in kernels:
        verified[k["problem_id"]] += 1
        if k["reasoning"] is not None:
            lengths.setdefault(k["problem_id"], []).append(k["reasoning_length"])
    return {pid: {"reasoning_length_mean": (sum(lengths[pid]) / len(lengths[pid])
                                            if pid in lengths else None),
                  "with_reasoning": len(lengths.get(pid, [])), "verified_kernels": n}
            for pid, n in verified.items()}


def rank_problem(kernels: list[dict], margin: float) -> list[dict]:
    """Step 4's order: speed tiers (within ``margin`` of the tier's fastest), shorter reasoning
    first inside a tier, then faster, then submission id."""
    use_inductor = all(k["speedup_vs_inductor"] is not None for k in kernels)
    for k in kernels:
        k["speed"] = (k["speedup_vs_inductor"] if use_inductor else k["speedup_vs_eager"]) or 0.0
    rest = sorted(kernels, key=lambda k: (-k["speed"], k["submission_id"]))
    ordered: list[dict] = []
    while rest:
        floor = rest[0]["speed"] * (1 - margin)
        tier = [k for k in rest if k["speed"] >= floor]
        rest = [k for k in rest if k["speed"] < floor]
        ordered += sorted(tier, key=lambda k: (k["reasoning_length"], -k["speed"],
                                               k["submission_id"]))
    return ordered


def balance(pairs: list[dict], group_of: Callable[[dict], Any], max_share: float,
            stats: StageStats) -> list[dict]:
    """Step 5: trim over-full groups, lowest-ranked pairs first (see the module docstring)."""
    groups: dict[Any, list[dict]] = {}
    for p in pairs:
        groups.setdefault(group_of(p), []).append(p)
    if len(groups) < 2:
        return pairs
    share = max(max_share, 1.0 / len(groups))
    for members in groups.values():  # weakest last: deepest rank in its problem, then slowest
        members.sort(key=lambda p: (p["rank"], -p["speed"], p["submission_id"]))
    while True:
        total = sum(len(m) for m in groups.values())
        over = [(len(m) - share * total, g) for g, m in groups.items()
                if len(m) > share * total + 1e-9]
        if not over:
            break
        _, group = max(over, key=lambda o: (o[0], str(o[1])))
        members = groups[group]
        others = total - len(members)
        allowed = max(1, math.floor(share * others / (1 - share) + 1e-9)) if share < 1 else \
            len(members)
        if allowed >= len(members):
            break
        stats.dropped(f"balance: {_label(group)}", len(members) - allowed)
        del members[allowed:]
    kept = {id(p) for m in groups.values() for p in m}
    return [p for p in pairs if id(p) in kept]


def _label(group: Any) -> str:
    return " level ".join(map(str, group)) if isinstance(group, tuple) else str(group)


def select(problems: dict[str, dict], kernels: list[dict], config: SftConfig,
           length: Callable[[str], int], stats: StageStats) -> list[dict]:
    """Steps 2-5 over the verified kernels; the kept pairs in output order."""
    for k in kernels:
        k["reasoning_length"] = length(k["reasoning"]) if k["reasoning"] else 0
    by_problem: dict[str, list[dict]] = {}
    for k in kernels:
        if not fast_enough(k, config, stats):
            continue
        if config.max_reasoning_tokens and k["reasoning_length"] > config.max_reasoning_tokens:
            stats.dropped("reasoning too long")
            continue
        by_problem.setdefault(k["problem_id"], []).append(k)
    pairs: list[dict] = []
    for pid in sorted(by_problem):
        ranked = rank_problem(by_problem[pid], config.speed_margin)
        if len(ranked) > config.per_problem:
            stats.dropped("beyond best k", len(ranked) - config.per_problem)
        for rank, k in enumerate(ranked[:config.per_problem]):
            problem = problems[pid]
            pairs.append({**k, "rank": rank, "category": problem.get("category") or "unknown",
                          "level": problem.get("level")})
    group_of = (lambda p: (p["category"], p["level"])) if config.balance_levels else \
        (lambda p: p["category"])
    return balance(pairs, group_of, config.max_share, stats)


def balance_table(before: Sequence[dict], after: Sequence[dict], levels: bool) -> str:
    """Pairs per category (x level) before selection (verified) and after, with shares."""
    key = (lambda p: _label((p["category"], p["level"]))) if levels else \
        (lambda p: str(p["category"]))
    b, a = Counter(map(key, before)), Counter(map(key, after))
    nb, na = max(1, sum(b.values())), max(1, sum(a.values()))
    width = max([len("group"), *map(len, b)])
    lines = [f"{'group':<{width}}  {'verified':>8} {'share':>6}  {'selected':>8} {'share':>6}"]
    for g, n in sorted(b.items(), key=lambda kv: (-kv[1], kv[0])):
        lines.append(f"{g:<{width}}  {n:>8} {n / nb:>6.1%}  {a[g]:>8} {a[g] / na:>6.1%}")
    lines.append(f"{'total':<{width}}  {sum(b.values()):>8} {'':>6}  {sum(a.values()):>8}")
    return "\n".join(lines)


def _answer(kernel: dict) -> str:
    code = f"```python\n{kernel['kernel'].rstrip()}\n```"
    return f"{kernel['reasoning']}\n\n{code}" if kernel["reasoning"] else code


@dataclass
class SftResult:
    pairs: list[dict]
    difficulty: dict[str, dict]
    unit: str
    table: str
    stats: StageStats


def sft_pairs(problems_path: str | Path, verdicts_path: str | Path,
              submissions_path: str | Path, config: SftConfig | None = None,
              stats: StageStats | None = None, split: str | None = None) -> SftResult:
    """The selected SFT rows, the per-problem reasoning difficulty and the balance table."""
    from kernelmill.grade.problems import load_problems

    config = config or SftConfig()
    stats = stats or StageStats("export-sft")
    problems = load_problems(problems_path, split)
    if not problems:
        raise KernelmillError(f"{problems_path}: no problems (rows need id and source, or "
                              "problem_id and reference)")
    length, unit = length_counter(config.tokenizer)
    kernels = verified_kernels(problems, verdicts_path, submissions_path, stats)
    chosen = select(problems, kernels, config, length, stats)
    difficulty = reasoning_difficulty(kernels)
    before = [{"category": problems[k["problem_id"]].get("category") or "unknown",
               "level": problems[k["problem_id"]].get("level")} for k in kernels]
    table = balance_table(before, chosen, config.balance_levels)
    rows = []
    for k in chosen:
        problem = problems[k["problem_id"]]
        backend = config.backend or kernel_backend(k["kernel"])
        rows.append({
            "submission_id": k["submission_id"], "problem_id": k["problem_id"],
            "name": problem.get("name"), "category": k["category"], "level": k["level"],
            "problem": problem["source"], "reasoning": k["reasoning"],
            "reasoning_length": k["reasoning_length"], "kernel": k["kernel"],
            "backend": backend, "rank": k["rank"],
            "speedup_vs_eager": k["speedup_vs_eager"],
            "speedup_vs_inductor": k["speedup_vs_inductor"],
            "timing_device": k["timing_device"],
            "problem_reasoning_length": difficulty[k["problem_id"]]["reasoning_length_mean"],
            "messages": [*prompt_messages(problem["source"], backend),
                         {"role": "assistant", "content": _answer(k)}],
        })
    return SftResult(rows, difficulty, unit, table, stats)


def export_sft(problems_path: str | Path, verdicts_path: str | Path,
               submissions_path: str | Path, out_path: str | Path,
               config: SftConfig | None = None, what: str = "sft",
               split: str | None = None) -> SftResult:
    """Write the SFT rows (``what="sft"``) or the difficulty table (``"difficulty"``)."""
    start = time.perf_counter()
    result = sft_pairs(problems_path, verdicts_path, submissions_path, config, split=split)
    with JsonlWriter(out_path, key="submission_id" if what == "sft" else "problem_id",
                     resume=False) as writer:
        if what == "sft":
            for row in result.pairs:
                writer.write(row)
                result.stats.kept()
        else:
            for pid, value in sorted(result.difficulty.items()):
                writer.write({"problem_id": pid, **value, "unit": result.unit})
                result.stats.kept()
    result.stats.seconds = time.perf_counter() - start
    return result


def add_sft_arguments(parser: argparse.ArgumentParser) -> None:
    """The selection flags of ``kernelmill export --format sft|difficulty``."""
    add_options(parser, SftConfig)


def export_sft_command(args: argparse.Namespace) -> int:
    if not args.verdicts or not args.submissions:
        raise KernelmillError(f"--format {args.format} needs --verdicts FILE and --submissions "
                              "FILE")
    config = config_from_args(SftConfig, args)
    what = "difficulty" if args.format == "difficulty" else "sft"
    result = export_sft(args.records, args.verdicts, args.submissions, args.out, config, what,
                        split=getattr(args, "split", None))
    print(result.table)
    if what == "sft":
        print(f"exported {result.stats.n_kept} SFT pair(s) to {args.out}; "
              + result.stats.summary())
    else:
        print(f"exported the mean reasoning length ({result.unit}) of {result.stats.n_kept} "
              f"problem(s) to {args.out}")
    return 0
