"""JSON Lines store: resumable append-only writer and a reader that survives corrupt lines.

Every stage reads records and writes records. A writer appends and flushes per record and knows
the keys already in its file, so a stage that is killed and rerun skips finished work. A reader
reports a truncated or corrupt line as ``file:line: reason`` and carries on with the rest.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonlines

from .errors import KernelmillError
from .record import Record

log = logging.getLogger("kernelmill")

ErrorHandler = Callable[[str], None]


def _warn(message: str) -> None:
    log.warning(message)


def read_jsonl(path: str | os.PathLike, on_error: ErrorHandler | None = None) -> Iterator[dict]:
    """Yield the JSON objects of ``path``; bad lines go to ``on_error`` as ``file:line: reason``."""
    report = on_error or _warn
    path = Path(path)
    if not path.exists():
        raise KernelmillError(f"{path}: no such file")
    with path.open("r", encoding="utf-8", errors="replace") as handle:
        reader = jsonlines.Reader(handle)
        lineno = 0
        while True:
            lineno += 1
            try:
                obj = reader.read(allow_none=False, skip_empty=False)
            except EOFError:
                return
            except jsonlines.InvalidLineError as exc:
                if exc.line.strip():
                    report(f"{path}:{exc.lineno}: corrupt or truncated line skipped ({exc.args[0]})")
                continue
            if not isinstance(obj, dict):
                report(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}; skipped")
                continue
            yield obj


def read_records(path: str | os.PathLike, on_error: ErrorHandler | None = None) -> Iterator[Record]:
    """Yield the records of ``path``; malformed lines are reported and skipped."""
    report = on_error or _warn
    lineno = 0

    def count_errors(message: str) -> None:
        report(message)

    for lineno, obj in enumerate(read_jsonl(path, count_errors), start=1):
        try:
            yield Record.from_dict(obj)
        except (TypeError, ValueError) as exc:
            report(f"{path}: record {obj.get('id', f'#{lineno}')!s}: {exc}; skipped")


def existing_keys(path: str | os.PathLike, key: str = "id") -> set[str]:
    path = Path(path)
    if not path.exists():
        return set()
    return {str(obj[key]) for obj in read_jsonl(path, on_error=lambda _m: None) if key in obj}


def _drop_partial_tail(path: Path) -> None:
    """A writer killed mid-line leaves a tail without newline: move it aside, keep the rest."""
    size = path.stat().st_size
    if size == 0:
        return
    with path.open("rb+") as handle:
        handle.seek(-1, os.SEEK_END)
        if handle.read(1) == b"\n":
            return
        handle.seek(0)
        data = handle.read()
        cut = data.rfind(b"\n") + 1
        partial = data[cut:]
        handle.truncate(cut)
    with open(f"{path}.partial", "ab") as aside:
        aside.write(partial + b"\n")
    log.warning(f"{path}: unfinished last line moved to {path}.partial")


class JsonlWriter:
    """Append-only writer keyed by ``key``: skips objects whose key is already in the file.

    >>> with JsonlWriter("out.jsonl") as out:
    ...     out.write(record)      # returns False when the key was written before
    """

    def __init__(self, path: str | os.PathLike, key: str = "id", resume: bool = True):
        self.path = Path(path)
        self.key = key
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if not resume and self.path.exists():
            self.path.unlink()
        if self.path.exists():
            _drop_partial_tail(self.path)
        self.seen: set[str] = existing_keys(self.path, key)
        self._handle = self.path.open("a", encoding="utf-8")
        self._writer = jsonlines.Writer(self._handle, flush=True, compact=True, sort_keys=False)
        self.written = 0

    def __contains__(self, key: object) -> bool:
        return str(key) in self.seen

    def write(self, obj: Record | dict[str, Any]) -> bool:
        data = obj.to_dict() if isinstance(obj, Record) else obj
        key = str(data[self.key])
        if key in self.seen:
            return False
        self._writer.write(data)
        self.seen.add(key)
        self.written += 1
        return True

    def close(self) -> None:
        self._writer.close()
        self._handle.close()

    def __enter__(self) -> "JsonlWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
