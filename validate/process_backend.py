"""The local backend over several interpreters: slots shared among child processes.

One process's slots share its interpreter lock: every grade's window commands, result decoding
and judging pass through it. ``ProcessBackend`` spawns ``processes`` children, gives each a
share of the slots (``LocalBackend``-like threads in each) and feeds each as many items as it
has slots, the next one as a result comes back, so a busy child's lock holds only its own
slots. Locks that matter across slots (a GPU's timing lock, the host's and the GPU's memory
budgets) are files, shared by every process of the machine.

Each child has a pipe of its own (no queue shared between processes: a child killed in the
middle of a message would leave the others' reader waiting for the rest of it), so a child that
dies is seen as its pipe's end. A task function and its items and results cross these pipes:
``fn`` is module-level, both picklable. A child that dies (killed for memory) fails the run
with a one-line error naming what it held; results already yielded stay with the caller. A
caller that stops early stops the children (what they would finish, no one would write).
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
from multiprocessing.connection import wait
from typing import Any

from kernelmill.core.devices import Slot, TaskFn
from kernelmill.core.errors import KernelmillError

from .admission import GPU_LEDGER_VAR
from .zygote_child import PR_SET_PDEATHSIG, _prctl

_END_WAIT_S = 10.0  # how long a child that finished is given to report and exit


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
        shares = [self.slots[k::self.processes] for k in range(self.processes)]
        children = [_Child(context, fn, share, env, self.initializer) for share in shares]
        feed = _Feed(items, children)
        try:
            while feed.pending:
                for child in feed.heard():
                    for kind, index, payload in child.messages():
                        if kind == "cpu":
                            self.children_cpu_s += payload
                            continue
                        feed.done(child, index)
                        if kind == "error":
                            raise KernelmillError(f"{_name(items[index])}: {payload}")
                        yield items[index], payload
                    if child.gone and child.held:
                        child.process.join(_END_WAIT_S)  # its pipe ended first: its exit code
                        raise KernelmillError(
                            f"a grading process (pid {child.process.pid}) ended with exit code "
                            f"{child.process.exitcode} holding "
                            f"{', '.join(_name(items[i]) for i in sorted(child.held)[:8])}; "
                            f"{len(feed.pending)} items not done (a rerun resumes)")
        finally:
            stop = bool(feed.pending)
            for child in children:
                self.children_cpu_s += child.end(stop)
            ledgers.cleanup()


class _Child:
    """One spawned child, its pipe, and the items it holds."""

    def __init__(self, context, fn: TaskFn, slots: list[Slot], env: dict, initializer):
        self.slots = len(slots)
        self.conn, child_end = context.Pipe()
        self.process = context.Process(
            target=_serve, args=(fn, slots, child_end, env, initializer, os.getpid()),
            name="kernelmill-slots", daemon=True)  # (its workers are not multiprocessing's)
        self.process.start()
        child_end.close()
        self.held: set[int] = set()
        self.gone = False  # its pipe ended (it exited, or died)
        self.ended = False  # told there are no more items

    def send(self, message) -> None:
        try:
            self.conn.send(message)
        except (OSError, ValueError):  # it died: its pipe's end is heard next
            self.gone = True

    def messages(self) -> Iterator[tuple]:
        """Every message it has sent so far (``gone`` once its pipe ends)."""
        while not self.gone:
            try:
                if not self.conn.poll():
                    return
                yield self.conn.recv()
            except (EOFError, OSError):
                self.gone = True

    def end(self, stop: bool) -> float:
        """Let it end (stopped at once with ``stop``); the CPU seconds it reported."""
        cpu = 0.0
        if stop and self.process.is_alive():
            self.process.terminate()
        else:
            self.send(None)
            if wait([self.conn], _END_WAIT_S):
                cpu = sum(p for k, _i, p in self.messages() if k == "cpu")
        self.process.join(_END_WAIT_S)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.conn.close()
        return cpu


class _Feed:
    """Which items are pending, and each child fed up to its slots' count of them."""

    def __init__(self, items: list, children: list[_Child]):
        self.items, self.children = items, children
        self.pending = set(range(len(items)))
        self.next = 0
        for child in children:
            self._fill(child)

    def _fill(self, child: _Child) -> None:
        while self.next < len(self.items) and len(child.held) < child.slots and not child.gone:
            child.held.add(self.next)
            child.send((self.next, self.items[self.next]))
            self.next += 1

    def done(self, child: _Child, index: int) -> None:
        child.held.discard(index)
        self.pending.discard(index)
        self._fill(child)

    def heard(self) -> list[_Child]:
        """The children with something to read (a message, or their pipe's end)."""
        live = {child.conn: child for child in self.children if not child.gone}
        if not live:
            raise KernelmillError(f"the grading processes ended with {len(self.pending)} "
                                  "items not done")
        return [live[conn] for conn in wait(list(live))]


def _name(item) -> str:
    """What names an item in an error: its submission ids where it has them."""
    rows = item if isinstance(item, (list, tuple)) else [item]
    ids = [str(r.get("submission_id") or r.get("id")) for r in rows
           if isinstance(r, dict) and (r.get("submission_id") or r.get("id"))]
    return ("submission " + ", ".join(ids[:4])) if ids else f"item {str(item)[:60]}"


def _serve(fn: TaskFn, slots: list[Slot], conn, env: dict, initializer, parent: int) -> None:
    """A child: one thread per slot, each taking the items its pipe brings until the end."""
    _prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM))  # a parent killed takes its children along
    if os.getppid() != parent:  # it died before that took effect
        os._exit(1)
    os.environ.update(env)
    if initializer is not None:
        initializer()
    local: queue.Queue = queue.Queue()
    sending = threading.Lock()

    def send(message) -> None:
        with sending:
            conn.send(message)

    def receive() -> None:  # the parent's items into the slots' queue; an end for each slot
        while True:
            try:
                got = conn.recv()
            except (EOFError, OSError):
                got = None
            if got is None:
                for _ in slots:
                    local.put(None)
                return
            local.put(got)

    def run_slot(slot: Slot) -> None:
        while (got := local.get()) is not None:
            index, item = got
            try:
                send(("result", index, fn(item, slot)))
            except BaseException as exc:  # noqa: BLE001 — one line for the parent
                last = traceback.extract_tb(exc.__traceback__)[-1:]
                where = f" at {last[0].filename}:{last[0].lineno}" if last else ""
                send(("error", index, f"{type(exc).__name__}: {exc}{where}"[:2000]))

    threading.Thread(target=receive, name="items", daemon=True).start()
    threads = [threading.Thread(target=run_slot, args=(slot,), name=f"slot-{i}")
               for i, slot in enumerate(slots)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    usage = resource.getrusage(resource.RUSAGE_SELF)  # its threads; not its workers
    send(("cpu", None, usage.ru_utime + usage.ru_stime))
    conn.close()
