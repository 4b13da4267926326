"""KernelBench interop: import a folder tree of problem files, export records as that layout."""
from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, field
from pathlib import Path

from .errors import KernelmillError, ProblemError
from .problem import check_source
from .record import Record
from .stats import StageStats
from .store import JsonlWriter, read_records

_LEVEL_DIR = re.compile(r"(?i)^level[_-]?(\d+)$")


@dataclass
class ImportResult:
    stats: StageStats
    malformed: list[str] = field(default_factory=list)  # "file:line: reason"


def _level_from_path(path: Path) -> int | None:
    for part in reversed(path.parts[:-1]):
        match = _LEVEL_DIR.match(part)
        if match:
            return int(match.group(1))
    return None


def problem_files(root: Path) -> list[Path]:
    if root.is_file():
        return [root]
    if not root.is_dir():
        raise KernelmillError(f"{root}: no such file or folder")
    # hidden folders below the root are skipped; the root itself may be "../x" or ".hidden/x"
    return sorted(p for p in root.rglob("*.py")
                  if p.name != "__init__.py"
                  and not any(s.startswith(".") for s in p.relative_to(root).parts))


def record_from_file(path: Path, generator: str = "import") -> Record:
    """Read one KernelBench-format file into a record; raises ProblemError when malformed."""
    try:
        source = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ProblemError(f"cannot read file: {exc}", str(path)) from None
    problem = check_source(source, str(path))
    level = _level_from_path(path) or problem.level
    return Record.from_source(source, name=problem.name, category=problem.category, level=level,
                              provenance={"generator": generator, "origin": str(path)})


def import_folder(root: str | Path, out: str | Path, generator: str = "import") -> ImportResult:
    """Import every ``*.py`` under ``root``; malformed files are listed with their reason."""
    result = ImportResult(StageStats("import"))
    with JsonlWriter(out) as writer:
        for path in problem_files(Path(root)):
            try:
                record = record_from_file(path, generator)
            except ProblemError as exc:
                result.malformed.append(str(exc))
                result.stats.dropped(f"malformed: {exc.reason.split(' (')[0]}")
                continue
            if writer.write(record):
                result.stats.kept()
            else:
                result.stats.count("already present")
    return result


def _safe_name(name: str) -> str:
    return re.sub(r"[^0-9A-Za-z_]+", "_", name).strip("_") or "problem"


def export_kernelbench(records_path: str | Path, out_dir: str | Path) -> dict[int, int]:
    """Write ``levelN/ID_Name.py`` files (IDs numbered from 1 per level); returns counts per level."""
    out_dir = Path(out_dir)
    counts: dict[int, int] = {}
    for record in read_records(records_path):
        level = int(record.level or 1)
        counts[level] = counts.get(level, 0) + 1
        folder = out_dir / f"level{level}"
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / f"{counts[level]}_{_safe_name(record.name)}.py"
        target.write_text(record.source if record.source.endswith("\n") else record.source + "\n",
                          encoding="utf-8")
    return counts


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
    from kernelmill.splits.sft import export_sft_command  # the SFT export belongs to splits/

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
