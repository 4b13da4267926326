"""The grading benchmark's problem sets (``grade_throughput.py --sets``): ``triton``, the
fidelity set's honest Triton answers; ``kernelbench``, benchmarks/kernelbench_set's answers to
KernelBench problems at KernelBench's sizes; ``mix``, Triton and CUDA variants with the hostile
fixtures. Each is built into a problems file and a submissions file."""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUBMISSIONS = ROOT / "tests" / "fixtures" / "submissions"
KERNELBENCH_SET = ROOT / "benchmarks" / "kernelbench_set"

TRITON_SCALE_ADD = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, 2.0 * x + y, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        scale_add_kernel[(triton.cdiv(n, {block}),)](x, y, out, n, BLOCK={block},
                                                     num_warps={warps})
        return out
'''

TRITON_ROW_SUM = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_sum_kernel(x_ptr, out_ptr, cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offsets = tl.arange(0, BLOCK)
    values = tl.load(x_ptr + row * stride + offsets, mask=offsets < cols, other=0.0)
    tl.store(out_ptr + row, tl.sum(values, axis=0))


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        rows, cols = x.shape
        out = torch.empty(rows, device=x.device, dtype=x.dtype)
        row_sum_kernel[(rows,)](x, out, cols, x.stride(0), BLOCK=triton.next_power_of_2(cols),
                                num_warps={warps})
        return out
'''


def build_inputs(folder: Path) -> tuple[Path, Path, int]:
    problems = []
    for path in sorted(SUBMISSIONS.glob("ref_*.py")):
        problems.append({"id": path.stem, "source": path.read_text()})
    big_add = (SUBMISSIONS / "ref_scale_add.py").read_text().replace("N = 4096", "N = 1 << 24")
    big_sum = (SUBMISSIONS / "ref_row_sum.py").read_text().replace(
        "ROWS = 64", "ROWS = 16384").replace("COLS = 96", "COLS = 1024")
    problems += [{"id": "scale_add_large", "source": big_add},
                 {"id": "row_sum_large", "source": big_sum}]
    rows = []
    for block in (256, 512, 1024, 2048, 4096):
        for warps in (2, 4, 8):
            rows.append({"submission_id": f"triton_add_b{block}_w{warps}",
                         "problem_id": "scale_add_large",
                         "source": TRITON_SCALE_ADD.format(block=block, warps=warps)})
    for warps in (1, 2, 4, 8):
        rows.append({"submission_id": f"triton_rowsum_w{warps}", "problem_id": "row_sum_large",
                     "source": TRITON_ROW_SUM.format(warps=warps)})
    cuda = (SUBMISSIONS / "cuda_scale_add.py").read_text()
    for threads in (128, 256, 512, 1024):
        source = cuda.replace('replace("BLOCK_THREADS", "256")',
                              f'replace("BLOCK_THREADS", "{threads}")').replace(
            "km_scale_add_256", f"km_scale_add_{threads}")
        rows.append({"submission_id": f"cuda_add_t{threads}", "problem_id": "scale_add_large",
                     "source": source})
    for path in sorted(SUBMISSIONS.glob("*.py")):
        if path.name.startswith(("ref_", "cuda_")) or path.stem == "crash_hang":
            continue
        text = path.read_text()
        problem = re.search(r"^# problem: (\S+)", text, re.MULTILINE).group(1)
        rows.append({"submission_id": path.stem, "problem_id": problem, "source": text})
    p_path, s_path = folder / "problems.jsonl", folder / "submissions.jsonl"
    p_path.write_text("".join(json.dumps(p) + "\n" for p in problems))
    s_path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p_path, s_path, len(rows)


def build_triton_set(folder: Path, device: str, copies: int = 1) -> tuple[Path, Path, int]:
    """The fidelity set (12 honest Triton answers at varied sizes, several under 0.1 ms),
    ``copies`` times over (each copy a submission of its own, as in a GRPO group)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from grade_fidelity import CPU_SIZES, SET, problem_source

    problems, rows = [], []
    for name, answer, sizes in SET:
        sizes = CPU_SIZES.get(name, sizes) if device == "cpu" else sizes
        problems.append({"id": name, "source": problem_source(answer, sizes)})
        rows += [{"submission_id": f"{name}#{copy}" if copy else name, "problem_id": name,
                  "source": answer.read_text()} for copy in range(copies)]
    p_path, s_path = folder / "triton_problems.jsonl", folder / "triton_submissions.jsonl"
    p_path.write_text("".join(json.dumps(p) + "\n" for p in problems))
    s_path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p_path, s_path, len(rows)


def find_kernelbench(path: str | None = None) -> Path:
    """The KernelBench problems folder (level1/, level2/, ...): ``path``, else
    ../shared/benchmarks/kernelbench beside the checkout, else shared/benchmarks/kernelbench
    inside it."""
    candidates = [Path(path)] if path else [ROOT.parent / "shared" / "benchmarks" / "kernelbench",
                                            ROOT / "shared" / "benchmarks" / "kernelbench"]
    for candidate in candidates:
        if (candidate / "level1").is_dir():
            return candidate
    raise SystemExit(f"no KernelBench problems folder (level1/, ...) at "
                     f"{' or '.join(map(str, candidates))}: pass --kernelbench PATH")


def kernelbench_answers(kernelbench: Path) -> list[tuple[Path, Path]]:
    """(answer, problem file) for every answer in benchmarks/kernelbench_set, from its
    ``# problem: levelN/FILE.py`` line; an answer naming a missing problem is an error."""
    pairs = []
    for answer in sorted(KERNELBENCH_SET.glob("level*_*.py")):
        named = re.search(r"^# problem: (\S+)", answer.read_text(), re.MULTILINE)
        if not named or not (kernelbench / named.group(1)).is_file():
            raise SystemExit(f"{answer}: its '# problem:' line names no file under {kernelbench}")
        pairs.append((answer, kernelbench / named.group(1)))
    return pairs


def validated_records(paths: list[str] | None) -> dict[str, dict]:
    """Validated records (``kernelmill validate`` or ``kernelbench_audit.py --out``) by the
    SHA-256 of their source: a problem graded with one is judged at its calibrated tolerance, as
    a published dataset's problems are (without one, the dtype's default: fp32's 1e-4)."""
    import hashlib

    found: dict[str, dict] = {}
    for path in paths or ():
        if not Path(path).exists():
            raise SystemExit(f"--records {path}: no such file")
        for line in read_lines(Path(path)):
            try:
                record = json.loads(line)
            except json.JSONDecodeError:  # a truncated line (a run cut short): left out
                continue
            if isinstance(record, dict) and record.get("source") and record.get("validation"):
                found[hashlib.sha256(record["source"].encode()).hexdigest()] = record
    return found


def build_kernelbench_set(folder: Path, kernelbench: Path, device: str,
                          copies: int = 1, records: dict | None = None) -> tuple[Path, Path, int]:
    """The KernelBench set: each answer graded against its problem file, ``copies`` times over,
    with the problem's validation where ``records`` (``validated_records``) hold it. On CPU the
    problems' sizes are shrunk (check_cpu.shrink) and the CUDA answers left out."""
    import hashlib

    shrink = None
    if device == "cpu":
        sys.path.insert(0, str(KERNELBENCH_SET))
        from check_cpu import OVERRIDES, shrink
    problems, rows = [], []
    for answer, problem in kernelbench_answers(kernelbench):
        text = answer.read_text()
        if shrink and "load_inline" in text:
            continue
        source = problem.read_text()
        record = (records or {}).get(hashlib.sha256(source.encode()).hexdigest())
        problems.append({"id": answer.stem, "source": shrink(source, OVERRIDES.get(
            f"{problem.parent.name}/{problem.name}")) if shrink else source,
            **({"validation": record["validation"]} if record and not shrink else {})})
        rows += [{"submission_id": f"{answer.stem}#{copy}" if copy else answer.stem,
                  "problem_id": answer.stem, "source": text} for copy in range(copies)]
    p_path, s_path = folder / "kb_problems.jsonl", folder / "kb_submissions.jsonl"
    p_path.write_text("".join(json.dumps(p) + "\n" for p in problems))
    s_path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p_path, s_path, len(rows)


def build_set(name: str, folder: Path, args: argparse.Namespace) -> tuple[Path, Path, int]:
    """The problems and submissions files of the set ``name`` (only the problems whose id
    ``--match`` finds, where given), and the submissions' count."""
    if name == "triton":
        made = build_triton_set(folder, args.device, args.copies)
    elif name == "kernelbench":
        records = validated_records(args.records)
        made = build_kernelbench_set(folder, find_kernelbench(args.kernelbench), args.device,
                                     args.copies, records)
        if args.records:
            report_validation(made[0])
    else:
        made = build_inputs(folder)
    return only_matching(made, getattr(args, "match", None))


def only_matching(made: tuple[Path, Path, int], pattern: str | None) -> tuple[Path, Path, int]:
    """The set cut to the problems whose id ``pattern`` (a regular expression) finds, and their
    submissions: the same submissions graded to the end in each of two runs compare their CPU
    and time per submission, where runs cut by ``--deadline`` grade different mixes."""
    if not pattern:
        return made
    import re

    problems_path, subs_path, _count = made
    problems = [p for p in map(json.loads, read_lines(problems_path))
                if re.search(pattern, p["id"])]
    kept = {p["id"] for p in problems}
    subs = [r for r in map(json.loads, read_lines(subs_path)) if r["problem_id"] in kept]
    problems_path.write_text("".join(json.dumps(p) + "\n" for p in problems))
    subs_path.write_text("".join(json.dumps(r) + "\n" for r in subs))
    return problems_path, subs_path, len(subs)


def report_validation(problems: Path) -> None:
    """How many of the set's problems carry a validation, and those the validator rejected
    (an honest answer's verdict there says little: the problem is defective)."""
    rows = [json.loads(line) for line in read_lines(problems)]
    validated = [r for r in rows if r.get("validation")]

    def failed(validation: dict) -> str:
        checks = validation.get("checks") or {}
        return ", ".join(sorted(k for k, c in checks.items()
                                if isinstance(c, dict) and c.get("passed") is False)) or "failed"

    rejected = [f"{r['id']} ({failed(r['validation'])})" for r in validated
                if r["validation"].get("passed") is False]
    print(f"{len(validated)} of {len(rows)} problems graded at their validated tolerance; "
          f"rejected by the validator: {', '.join(rejected) or 'none'}", flush=True)


def read_lines(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line.strip()] \
        if path.exists() else []
