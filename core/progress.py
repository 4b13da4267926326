"""Progress for long work: a rich bar on a terminal, a line every few seconds otherwise.

Off a terminal a line is printed every ``every_s`` seconds even while no item finishes, so a
slow item never leaves the progress standing still; ``status`` (optional) says what is running
now (``"einsum_bmm_softshrink 95s"``), on that line and beside the bar.
"""
from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

T = TypeVar("T")
console = Console(stderr=True)


class _Ticker:
    """Calls ``tick`` every ``every_s`` seconds on a daemon thread until stopped."""

    def __init__(self, tick: Callable[[], None], every_s: float):
        self._tick, self._every = tick, every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="progress-ticker")

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            try:
                self._tick()
            except Exception:  # noqa: BLE001 — progress must never break the work
                pass

    def __enter__(self) -> _Ticker:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=1)


def track(items: Iterable[T], total: int | None = None, description: str = "working",
          every_s: float = 10.0, status: Callable[[], str] | None = None) -> Iterator[T]:
    """Yield ``items`` while showing progress on stderr."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    if sys.stderr.isatty():
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn(), TimeRemainingColumn(), TextColumn("{task.fields[now]}"))
        with Progress(*columns, console=console, transient=False) as bar:
            task = bar.add_task(description, total=total, now="")

            def show() -> None:
                bar.update(task, now=status() if status else "")

            with _Ticker(show, 1.0):
                for item in items:
                    yield item
                    bar.advance(task)
        return
    start = time.monotonic()
    state = {"done": 0, "last": start}
    lock = threading.Lock()

    def line(now: float) -> None:
        of = f"/{total}" if total else ""
        running = status() if status else ""
        print(f"{description}: {state['done']}{of} ({now - start:.0f}s)"
              + (f"; running: {running}" if running else ""), file=sys.stderr, flush=True)
        state["last"] = now

    def tick() -> None:
        with lock:
            now = time.monotonic()
            if now - state["last"] >= every_s:
                line(now)

    with _Ticker(tick, max(0.05, every_s / 4)):
        for item in items:
            yield item
            with lock:
                state["done"] += 1
                now = time.monotonic()
                if now - state["last"] >= every_s:
                    line(now)
