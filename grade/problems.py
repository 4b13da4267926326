"""The problems a batch of submissions is graded against, from any of the forms kernelmill writes.

``load_problems(spec, split=None)`` returns ``{problem_id: record}`` where a record is the dict the
grader takes (``id``, ``source``, ``validation`` with the calibrated tolerances). ``spec`` is:

- a records file (JSONL rows with ``id``/``source``, e.g. ``splits/eval.jsonl``);
- a JSONL file of published dataset rows (``problem_id``/``reference``);
- a dataset folder written by ``kernelmill publish`` (``data/{split}-*.parquet``) or one parquet
  file;
- a Hugging Face Hub dataset id (``org/name``), read with ``datasets.load_dataset``.

``split`` keeps one split of a dataset folder or Hub dataset (default: every split). A dataset row
carries its calibration (``atol``, ``rtol``, ``roofline_ms``, ``eager_ms``,
``calibration_device``, ``calibration_scale``); they land in the record's ``validation`` section
under the names the validator uses (``resized`` is the calibration scale), so grading a published
row and grading the record it came from use the same tolerances at the same size. The row's
``roofline_ms`` is carried along for the record; the grader bounds an answer's time by the
grading device's own memory roofline, never by it (it is the larger of that and the reference's
FLOPs at the device's peak, which an honest algebraic rewrite may beat). Its
``distributions`` column (``[{name, supported}]``) becomes ``validation.distributions``: the
grader draws trials only under the supported ones (``Policy.distributions_for``).
"""
from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from kernelmill.core.errors import KernelmillError
from kernelmill.core.store import read_jsonl

log = logging.getLogger("kernelmill")

# dataset column -> validation key
CALIBRATION_COLUMNS = {"atol": "atol", "rtol": "rtol", "roofline_ms": "roofline_ms",
                       "eager_ms": "eager_ms", "calibration_device": "device",
                       "calibration_scale": "resized"}
# dataset column: the grading input distributions validation measured, each supported or not
DISTRIBUTIONS_COLUMN = "distributions"


def distributions_column(validation: dict | None) -> list[dict] | None:
    """``validation.distributions`` as the dataset column: ``[{name, supported}]``; None where
    the record was not measured."""
    measured = (validation or {}).get("distributions")
    if not isinstance(measured, dict):
        return None
    return [{"name": str(name), "supported": _flag(entry.get("supported"))}
            for name, entry in measured.items() if isinstance(entry, dict)]


def _flag(value: Any) -> bool | None:
    """A measured support flag, or None (not measured: the grader keeps the distribution)."""
    return value if isinstance(value, bool) else None


def distributions_from_column(value: Any) -> dict | None:
    """The dataset column back as ``validation.distributions`` (None: no column value)."""
    if not isinstance(value, (list, tuple)):
        return None
    return {str(e["name"]): {"supported": _flag(e.get("supported"))}
            for e in value if isinstance(e, dict) and e.get("name")}


def calibration_of_row(row: dict[str, Any]) -> dict[str, Any]:
    """A dataset row's calibration columns as the record's ``validation`` section."""
    validation = {key: row[column] for column, key in CALIBRATION_COLUMNS.items()
                  if row.get(column) is not None}
    distributions = distributions_from_column(row.get(DISTRIBUTIONS_COLUMN))
    if distributions is not None:
        validation["distributions"] = distributions
    return validation


def record_from_row(row: dict[str, Any]) -> dict[str, Any] | None:
    """A grader record from a records row or a published dataset row; None if it is neither."""
    if isinstance(row.get("id"), str) and isinstance(row.get("source"), str):
        return row
    if not (isinstance(row.get("problem_id"), str) and isinstance(row.get("reference"), str)):
        return None
    return {"id": row["problem_id"], "source": row["reference"], "name": row.get("name"),
            "category": row.get("category"), "level": row.get("level"),
            "validation": calibration_of_row(row)}


def _parquet_rows(paths: Iterable[Path]) -> Iterator[dict]:
    import pyarrow.parquet as pq

    columns = ["problem_id", "reference", "name", "category", "level", *CALIBRATION_COLUMNS,
               DISTRIBUTIONS_COLUMN]
    for path in paths:
        table = pq.read_table(path)
        present = [c for c in columns if c in table.column_names]
        yield from table.select(present).to_pylist()


def _dataset_files(folder: Path, split: str | None) -> list[Path]:
    files = sorted((folder / "data").glob("*.parquet")) or sorted(folder.glob("*.parquet"))
    if split is not None:
        files = [p for p in files if p.name.split("-")[0] == split]
    return files


def split_names(files: Iterable[Path]) -> list[str]:
    """The splits a dataset folder's parquet files hold (``eval-00000-of-00001.parquet``)."""
    return sorted({p.name.split("-")[0] for p in files})


def _no_split(where: object, split: str, present: Iterable[str]) -> KernelmillError:
    names = ", ".join(present)
    return KernelmillError(f"{where}: no split {split!r} (splits: {names or 'none'})")


def _hub_rows(repo_id: str, split: str | None) -> Iterator[dict]:
    import datasets

    try:
        loaded = datasets.load_dataset(repo_id)
    except Exception as exc:  # noqa: BLE001 — one line for the user: what failed to load
        raise KernelmillError(f"{repo_id}: not a file or folder here, and load_dataset failed: "
                              f"{type(exc).__name__}: {exc}") from None
    if split is not None and split not in loaded:
        raise _no_split(repo_id, split, sorted(loaded))
    for name, part in loaded.items():
        if split is None or name == split:
            yield from part


def iter_rows(spec: str | Path, split: str | None = None) -> Iterator[dict]:
    path = Path(spec)
    if path.is_dir():
        files = _dataset_files(path, split)
        if not files and split is not None and _dataset_files(path, None):
            raise _no_split(path, split, split_names(_dataset_files(path, None)))
        if not files:
            raise KernelmillError(f"{path}: no {split + ' ' if split else ''}parquet files "
                                  "(a dataset folder from `kernelmill publish` has data/*.parquet)")
        yield from _parquet_rows(files)
    elif path.suffix == ".parquet":
        if not path.exists():
            raise KernelmillError(f"{path}: no such file")
        yield from _parquet_rows([path])
    elif path.exists():
        yield from read_jsonl(path)
    elif str(spec).count("/") == 1 and not str(spec).startswith((".", "/")):
        yield from _hub_rows(str(spec), split)
    else:
        raise KernelmillError(f"{spec}: no such file or folder")


def load_problems(spec: str | Path, split: str | None = None) -> dict[str, dict]:
    """``{problem_id: record}`` from ``spec`` (see the module docstring)."""
    problems: dict[str, dict] = {}
    skipped = 0
    for row in iter_rows(spec, split):
        record = record_from_row(row) if isinstance(row, dict) else None
        if record is None:
            skipped += 1
            continue
        problems[str(record["id"])] = record
    if skipped:
        log.warning(f"{spec}: {skipped} row(s) without id/source or problem_id/reference skipped")
    return problems
