"""Progress for long work: a rich bar on a terminal, a line every few seconds otherwise."""
from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator
from typing import TypeVar

from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                           TimeElapsedColumn, TimeRemainingColumn)

T = TypeVar("T")
console = Console(stderr=True)


def track(items: Iterable[T], total: int | None = None, description: str = "working",
          every_s: float = 10.0) -> Iterator[T]:
    """Yield ``items`` while showing progress on stderr."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    if sys.stderr.isatty():
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn(), TimeRemainingColumn())
        with Progress(*columns, console=console, transient=False) as bar:
            task = bar.add_task(description, total=total)
            for item in items:
                yield item
                bar.advance(task)
        return
    start = last = time.monotonic()
    done = 0
    for item in items:
        yield item
        done += 1
        now = time.monotonic()
        if now - last >= every_s:
            last = now
            of = f"/{total}" if total else ""
            print(f"{description}: {done}{of} ({now - start:.0f}s)", file=sys.stderr, flush=True)
