"""The local backend over several interpreters: slots shared among child processes.

One process's slots share its interpreter lock: every grade's window commands, result decoding
and judging pass through it. ``ProcessBackend`` spawns ``processes`` children, gives each a
share of the slots (``LocalBackend`` threads in each) and feeds them items from one queue, so a
busy child's lock holds only its own slots. Locks that matter across slots (a GPU's timing lock,
the host's and the GPU's memory budgets) are files, shared by every process of the machine.

A task function and its items and results cross a pipe: ``fn`` is module-level, both picklable.
A child that dies (killed for memory) fails the run with a one-line error naming what it held;
results already yielded stay with the caller.
"""
from __future__ import annotations

import multiprocessing
import os
import queue
import resource
import signal
import tempfile
import threading
import traceback
from collections.abc import Iterable, Iterator
from typing import Any

from kernelmill.core.devices import Slot, TaskFn
from kernelmill.core.errors import KernelmillError

from .admission import GPU_LEDGER_VAR
from .zygote_child import PR_SET_PDEATHSIG, _prctl

_POLL_S = 0.5  # how often the parent looks for a child that died while it waits


class ProcessBackend:
    """``slots`` (``core.devices.device_slots``) shared round-robin among ``processes``
    spawned children, each running its share as threads after calling ``initializer`` (a
    module-level function, or None)."""

    def __init__(self, slots: list[Slot], processes: int, initializer=None):
        self.slots = slots
        self.processes = max(1, min(int(processes), len(slots)))
        self.initializer = initializer
        self.children_cpu_s = 0.0  # CPU seconds of the children that ended (their threads)

    def map_unordered(self, fn: TaskFn, items: Iterable[Any]) -> Iterator[tuple[Any, Any]]:
        items = list(items)
        if not items:
            return
        context = multiprocessing.get_context("spawn")  # the parent has threads and CUDA
        # the children's GPU memory budgets: one per GPU, shared through ledgers in a folder
        # of this run's (a child alone would read the GPU's free memory as all its own)
        ledgers = tempfile.TemporaryDirectory(prefix="kernelmill-gpu-ledger-")
        env = {GPU_LEDGER_VAR: ledgers.name}
        todo, done = context.Queue(), context.Queue()
        for index, item in enumerate(items):
            todo.put((index, item))
        shares = [self.slots[k::self.processes] for k in range(self.processes)]
        for share in shares:  # one end mark per slot thread
            for _ in share:
                todo.put(None)
        children = [context.Process(target=_serve, args=(fn, share, todo, done, env,
                                                             self.initializer),
                                    name=f"kernelmill-slots-{k}", daemon=False)
                    for k, share in enumerate(shares)]
        for child in children:
            child.start()
        pending = set(range(len(items)))
        held: dict[int, int] = {}  # item index -> the child that took it (its pid)

        def heard(message) -> tuple | None:
            """A result or error message; None for the others (taken, CPU seconds)."""
            kind, index, payload, pid = message
            if kind == "took":
                held[index] = pid
                return None
            if kind == "cpu":
                self.children_cpu_s += payload
                return None
            return message

        try:
            while pending:
                try:
                    message = heard(done.get(timeout=_POLL_S))
                except queue.Empty:
                    _check_children(children, held, pending)
                    continue
                if message is None:
                    continue
                kind, index, payload, _pid = message
                pending.discard(index)
                held.pop(index, None)
                if kind == "error":
                    raise KernelmillError(f"item {index}: {payload}")
                yield items[index], payload
        finally:  # the caller stopped early or all is done: start nothing more
            _wind_down(children, todo, done, len(self.slots), heard, stop=bool(pending))
            ledgers.cleanup()


def _wind_down(children: list, todo, done, slots: int, heard, stop: bool) -> None:
    """Let the children end: no more items; all stopped where the caller stopped early
    (``stop``: what they grade now would be written by no one) or one died; what they send
    meanwhile passed to ``heard`` (a child's queue writes its last messages before it exits)."""
    _drain(todo)
    for _ in range(slots):
        todo.put(None)
    if stop or any(child.exitcode not in (None, 0) for child in children):
        # (a child that died may have died inside a queue's lock the others need; a child
        # stopped takes its workers with it: their zygotes die with it)
        for child in children:
            if child.is_alive():
                child.terminate()
    while True:  # the runs in progress end on their own
        alive = [child for child in children if child.is_alive()]
        for message in _drain(done):
            heard(message)
        if not alive:
            break
        alive[0].join(timeout=_POLL_S)
    todo.close()
    done.close()


def _check_children(children: list, held: dict[int, int], pending: set[int]) -> None:
    """Raise where a child died, or all ended with items not done."""
    dead = [c for c in children if c.exitcode not in (None, 0)]
    if dead:
        lost = sorted(i for i, pid in held.items() if pid in {c.pid for c in dead})
        raise KernelmillError(
            f"a grading process (pid {dead[0].pid}) ended with exit code {dead[0].exitcode}"
            + (f" holding items {', '.join(map(str, lost[:8]))}" if lost else "")
            + f"; {len(pending)} items not done (a rerun resumes)")
    if all(c.exitcode is not None for c in children):
        raise KernelmillError(f"the grading processes ended with {len(pending)} items not done")


def _serve(fn: TaskFn, slots: list[Slot], todo, done, env: dict, initializer=None) -> None:
    """A child: one thread per slot, each taking items until it reads an end mark."""
    pid = os.getpid()
    _prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM))  # a parent killed takes its children along
    os.environ.update(env)
    if initializer is not None:
        initializer()

    def run_slot(slot: Slot) -> None:
        while True:
            got = todo.get()
            if got is None:
                return
            index, item = got
            done.put(("took", index, None, pid))
            try:
                done.put(("result", index, fn(item, slot), pid))
            except BaseException as exc:  # noqa: BLE001 — one line for the parent
                last = traceback.extract_tb(exc.__traceback__)[-1:] or [None]
                where = f" at {last[0].filename}:{last[0].lineno}" if last[0] else ""
                done.put(("error", index, f"{type(exc).__name__}: {exc}{where}"[:2000], pid))

    threads = [threading.Thread(target=run_slot, args=(slot,), name=f"slot-{i}")
               for i, slot in enumerate(slots)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    usage = resource.getrusage(resource.RUSAGE_SELF)  # its threads; not its workers
    done.put(("cpu", None, usage.ru_utime + usage.ru_stime, pid))


def _drain(source) -> list:
    """What ``source`` (a queue) holds now, taken out."""
    taken = []
    while True:
        try:
            taken.append(source.get_nowait())
        except (queue.Empty, OSError, ValueError):
            return taken
