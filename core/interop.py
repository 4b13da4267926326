"""KernelBench interop: import a folder tree of problem files, export records as that layout."""
from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from .errors import KernelmillError, ProblemError
from .problem import check_source, read_source
from .record import Record
from .stats import StageStats
from .step import Step, option
from .store import JsonlWriter, read_records, replace_jsonl

log = logging.getLogger("kernelmill")

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
    source = read_source(path)
    problem = check_source(source, str(path))
    level = _level_from_path(path) or problem.level
    return Record.from_source(source, name=problem.name, category=problem.category, level=level,
                              provenance={"generator": generator, "origin": str(path)})


def import_folder(root: str | Path, out: str | Path, generator: str = "import") -> ImportResult:
    """Import every ``*.py`` under ``root``; malformed files are listed with their reason."""
    result = ImportResult(StageStats("import"))
    files = problem_files(Path(root))
    if not files:
        raise KernelmillError(f"{root}: no problem files (*.py) to import")
    with JsonlWriter(out) as writer:
        for path in files:
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
    if not result.stats.n_kept and not result.stats.counts["already present"]:
        raise KernelmillError(f"{root}: none of its {len(files)} file(s) is a KernelBench problem "
                              f"(first: {result.malformed[0]})")
    return result


def _safe_name(name: str) -> str:
    return re.sub(r"[^0-9A-Za-z_]+", "_", name).strip("_") or "problem"


def export_kernelbench(records_path: str | Path, out_dir: str | Path) -> dict[int, int]:
    """Write ``levelN/ID_Name.py`` files (IDs numbered from 1 per level); returns counts per level."""
    return write_kernelbench(read_records(records_path, allow_empty=False), out_dir)


def _level(value: object) -> int:
    try:
        return max(1, int(value or 1))  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return 1


def write_kernelbench(problems: Iterable[Record | dict], out_dir: str | Path) -> dict[int, int]:
    """``export_kernelbench`` of problems already read: records, or dicts with ``source`` (and
    ``name``, ``level``; e.g. ``grade.problems.load_problems``'s, from any form of problems)."""
    out_dir = Path(out_dir)
    counts: dict[int, int] = {}
    for problem in problems:
        if isinstance(problem, Record):
            problem = problem.to_dict()
        source = str(problem["source"])
        level = _level(problem.get("level"))
        counts[level] = counts.get(level, 0) + 1
        folder = out_dir / f"level{level}"
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / f"{counts[level]}_{_safe_name(str(problem.get('name') or ''))}.py"
        target.write_text(source if source.endswith("\n") else source + "\n", encoding="utf-8")
    return counts


@dataclass
class ImportConfig:
    """Knobs of the import stage."""

    generator: str = option("import", "provenance.generator written on every imported record")


def _run_import(inputs: list[Path], out: Path, config: ImportConfig) -> StageStats:
    result = import_folder(inputs[0], out, generator=config.generator)
    for line in result.malformed:
        log.warning(f"malformed, skipped: {line}")
    return result.stats


STEP = Step(
    name="import", title="import seeds", config=ImportConfig, run=_run_import,
    inputs=("@seeds",), output="seeds.jsonl", resumable=True,
    input_help="folder (or single file) of KernelBench-format problems",
    out_help="records file to append to (JSONL)",
    build_values=lambda build: {"generator": "seed"},
    help="read a folder of KernelBench-format files into records",
    description="Read every *.py under DIR (e.g. KernelBench/level1) into records; malformed "
                "files are listed with the reason and skipped.")


def _run_concat(inputs: list[Path], out: Path, config: object) -> StageStats:
    stats = StageStats("concat")
    with replace_jsonl(out) as writer:  # a failed run leaves the previous output
        for path in inputs:
            for record in read_records(path):
                if writer.write(record):
                    stats.kept()
                else:
                    stats.dropped("same id as an earlier problem")
        if not stats.n_kept:
            raise KernelmillError(f"{', '.join(map(str, inputs))}: no records in any input")
    return stats


@dataclass
class ConcatConfig:
    """The concat stage has no knobs."""


CONCAT = Step(
    name="concat", title="concatenate", config=ConcatConfig, run=_run_concat,
    inputs=("seeds.jsonl", "mined.jsonl", "synth.jsonl"), output="problems.jsonl",
    input_nargs="+",
    input_help="records files, in order", help="join records files, keeping the first of each id")
