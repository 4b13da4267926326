"""Where per-item work runs: the local backend (one slot per GPU, or CPU slots) and Ray.

A task function ``fn(item, slot)`` is a module-level (picklable) function; ``slot`` says which
device it may use (``{"device": "cuda:0", "env": {"CUDA_VISIBLE_DEVICES": "0"}}``) so it can pin
the worker processes it starts. ``map_unordered`` yields ``(item, result)`` as results arrive.
"""
from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from kernelmill.core.devices import Slot, TaskFn, device_slots, resolve_device
from kernelmill.core.errors import KernelmillError

__all__ = ["LocalBackend", "Slot", "TaskFn", "device_slots", "get_backend", "resolve_device"]


class LocalBackend:
    """Threads in this process, one per slot; each task starts its own worker processes."""

    def __init__(self, device: str = "auto", workers: int | None = None):
        self.slots = device_slots(device, workers)

    def map_unordered(self, fn: TaskFn, items: Iterable[Any]) -> Iterator[tuple[Any, Any]]:
        todo: queue.Queue = queue.Queue()
        done: queue.Queue = queue.Queue()
        count = 0
        for item in items:
            todo.put(item)
            count += 1

        def run_slot(slot: Slot) -> None:
            while True:
                try:
                    item = todo.get_nowait()
                except queue.Empty:
                    return
                try:
                    done.put((item, fn(item, slot), None))
                except BaseException as exc:  # noqa: BLE001 — surfaced to the caller below
                    done.put((item, None, exc))

        # Not daemons: a daemon slot thread still inside a worker run when the interpreter
        # shuts down (the caller stopped on an error: a full disk) aborts the process (SIGABRT).
        threads = [threading.Thread(target=run_slot, args=(slot,), name=f"slot-{i}")
                   for i, slot in enumerate(self.slots)]
        for thread in threads:
            thread.start()
        try:
            for _ in range(count):
                item, result, exc = done.get()
                if exc is not None:
                    raise exc
                yield item, result
        finally:  # the caller stopped early (an error, or it closed us): start nothing more;
            # the runs in progress end on their own and the interpreter waits for them
            _drain(todo)


def _drain(todo: queue.Queue) -> None:
    while True:
        try:
            todo.get_nowait()
        except queue.Empty:
            return


def get_backend(name: str = "local", *, device: str = "auto", workers: int | None = None,
                address: str | None = None, per_gpu: int | None = None,
                running: int | None = None, processes: int | None = None,
                initializer=None):
    """``per_gpu``/``running`` (Ray on CUDA): items each GPU's host runs at once, and the most
    worker processes it lets run (the local backend takes ``workers`` slots instead).
    ``processes`` > 1 (local): the slots shared among that many spawned interpreters
    (``process_backend.ProcessBackend``), each first calling ``initializer``."""
    if name == "local" and processes and processes > 1:
        from .process_backend import ProcessBackend

        return ProcessBackend(device_slots(device, workers), processes, initializer)
    if name == "local":
        return LocalBackend(device, workers)
    if name == "ray":
        from .ray_backend import RayBackend  # optional extra: pip install -e '.[ray]'

        return RayBackend(device=device, workers=workers, address=address, per_host=per_gpu,
                          running=running)
    raise KernelmillError(f"unknown backend {name!r} (local or ray)")
