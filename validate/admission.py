"""Memory-aware admission: start a GPU worker only when its memory fits on its GPU.

Each physical GPU has one ``GpuBudget``: the free memory read once when the first task asks
(less a margin), shared by every thread of this process that validates on that GPU. A task asks
for the peak bytes its worker will hold (``memory.probe_bytes``); it starts when that fits in
what the running tasks left, and waits otherwise. Three rules keep it live:

- a task alone on its GPU always starts, whatever it asked (so nothing waits forever);
- a task that asks for more than the whole budget (or for ``alone``) waits until the GPU is
  empty and keeps it to itself;
- a task that has waited ``max_wait_s`` is not overtaken any more: newer tasks wait behind it
  until it has started (smaller ones may fill the gaps before that), except those that fit in
  the room it will leave beside itself (``capacity - need``, counted over every such task
  still running), which can never hold it back (backfill, so the GPU does not drain idle).

``run_admitted`` wraps one worker run: admission, then a rerun alone when it still went out of
memory while it shared the GPU, and ``too_large`` when it went out of memory alone.
Unknown estimates count as ``unknown_fraction`` of the budget. A problem's workers run one after
the other under one ``Tenancy``: the second worker (the replay) keeps the first one's grant,
shrunk to what it asks, instead of queueing again behind newer problems (which cost a problem
too large to share the GPU a second wait of ``max_wait_s`` and a second drain of the GPU).

Each budget keeps its occupancy (``occupancy()``): how long it was held by no task, one or
several, how full it was on average, and how long an old waiter held newer tasks back while the
GPU drained for it, so a benchmark can say where a run's GPU time went.

Host memory (CPU workers) is admitted the same way, with a ``MemoryBudget`` for the host:
see ``host_admission``.
"""
from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .host_admission import HostLedger

log = logging.getLogger("kernelmill")

SHARED_POLL_S = 0.25  # how often a waiter reads other processes' holdings
MARGIN = 0.10  # of the free memory, kept back for fragmentation and what estimates miss
UNKNOWN_FRACTION = 0.5


# Measured on an H100 (15 KernelBench level 1-3 problems): the probe's
# max_memory_reserved over the live-bytes estimate had median 1.30 and max 2.69 (a ConvTranspose3d
# with a cuDNN workspace). Asking for 1.35x covers the typical problem; the rarer ones that still
# run out of memory while sharing are rerun alone.
ALLOCATOR_FACTOR = 1.35
# A worker's allocator may hold this much more than its grant before it must free its cache
# (``Tenancy(caps=True)``): a cap at the grant itself made 31 of 250 KernelBench replays meet it
# (live peaks up to 1.57x their grant) and rerun alone, each after the GPU drained for it (839
# problems/hour against 950 uncapped); the live peaks measured then stay under 1.5x.
CAP_FACTOR = 1.5


@dataclass(eq=False)
class Grant:
    need: int
    alone: bool
    waited_s: float = 0.0
    shared: bool = False  # another task held the same GPU at some time while this one did
    asked_alone: bool = False  # acquired with ``alone`` (not only for asking too much)
    backfill: bool = False  # started in the room a protected waiter leaves beside itself


class _Occupancy:
    """Time-weighted accounts of one budget, advanced at every change (``tick``)."""

    def __init__(self, now: float):
        self.start = self.last = now
        self.by_holders: dict[int, float] = {}  # number of holders -> seconds
        self.used_s = 0.0  # integral of used bytes over time (byte-seconds)
        self.alone_s = 0.0  # a task held the budget to itself
        self.draining_s = 0.0  # an old waiter held newer tasks back (while others still ran)
        self.idle_waiting_s = 0.0  # no holder although tasks waited

    def tick(self, now: float, holders: int, used: int, alone: bool, waiting: int,
             draining: bool) -> None:
        span = max(0.0, now - self.last)
        self.last = now
        if not span:
            return
        self.by_holders[holders] = self.by_holders.get(holders, 0.0) + span
        self.used_s += used * span
        self.alone_s += span if alone and holders else 0.0
        self.draining_s += span if draining and holders else 0.0
        self.idle_waiting_s += span if waiting and not holders else 0.0


class MemoryBudget:
    """Bytes of one GPU, or of the host, shared by the tasks of this process (see the module
    docstring). ``factor`` multiplies each estimate (the CUDA caching allocator's overhead)."""

    def __init__(self, free_bytes: int, total_bytes: int | None = None, *, margin: float = MARGIN,
                 unknown_fraction: float = UNKNOWN_FRACTION, max_wait_s: float = 120.0,
                 name: str = "gpu", factor: float = ALLOCATOR_FACTOR,
                 shared: HostLedger | None = None):
        self.factor = factor
        self.shared = shared  # other processes' holdings of the same memory (host budgets)
        self.capacity = max(0, int(free_bytes * (1.0 - margin)))
        self.total = int(total_bytes if total_bytes is not None else free_bytes)
        self.unknown_need = int(self.capacity * unknown_fraction)
        self.max_wait_s = max_wait_s
        self.name = name
        self.used = 0
        self.peak_holders = 0
        self._active: set[Grant] = set()
        self._alone = False
        self._cond = threading.Condition()
        self._tickets = itertools.count()
        # a ticket is (when the task first asked, a counter): older tickets come first
        self._waiting: dict[tuple[float, int], float] = {}  # ticket -> when it first asked
        self._asks: dict[tuple[float, int], tuple[int, bool]] = {}  # ticket -> (need, alone)
        self.backfills = 0  # tasks started beside a protected waiter (``_may_start``)
        self._occupancy = _Occupancy(time.monotonic())

    def _tick(self, now: float | None = None) -> None:
        """Advance the occupancy accounts to ``now`` (call with ``_cond`` held, before a
        change)."""
        now = time.monotonic() if now is None else now
        began = self._occupancy.last  # the span's state is the one at its start
        draining = any(began - since >= self.max_wait_s for since in self._waiting.values())
        self._occupancy.tick(now, self.holders, self.used, self._alone, len(self._waiting),
                             draining)

    def occupancy(self) -> dict:
        """Where this budget's time went since it was made: seconds with 0, 1 or more holders,
        the mean fill (used / capacity), seconds held by a task alone, seconds an old waiter
        held newer tasks back while the GPU drained for it, and seconds idle while tasks
        waited."""
        with self._cond:
            self._tick()
            occ = self._occupancy
            wall = max(occ.last - occ.start, 1e-9)
            several = sum(v for k, v in occ.by_holders.items() if k > 1)
            return {"name": self.name, "wall_s": round(wall, 3),
                    "capacity_gib": round(self.capacity / 2**30, 2),
                    "empty_s": round(occ.by_holders.get(0, 0.0), 3),
                    "one_holder_s": round(occ.by_holders.get(1, 0.0), 3),
                    "several_s": round(several, 3),
                    "alone_s": round(occ.alone_s, 3),
                    "draining_s": round(occ.draining_s, 3),
                    "idle_waiting_s": round(occ.idle_waiting_s, 3),
                    "mean_fill": round(occ.used_s / wall / max(self.capacity, 1), 4),
                    "peak_holders": self.peak_holders, "backfills": self.backfills}

    def need_for(self, estimate: int | None) -> int:
        """What a task with this estimate asks for (unknown: a large share of the budget). The
        estimate counts live tensor bytes; the caching allocator reserves more (rounded blocks,
        cached segments, library workspaces), so on a GPU the ask is the estimate times
        ``ALLOCATOR_FACTOR`` (``factor``)."""
        return self.unknown_need if estimate is None else int(estimate * self.factor)

    @property
    def holders(self) -> int:
        return len(self._active)

    def _backfill_room(self, ticket: tuple[float, int], now: float) -> int | None:
        """None when no older waiter is protected; else the bytes newer tasks may hold beside
        the oldest protected one (its ``capacity - need``; -1 when it needs the GPU alone)."""
        protected = [other for other, since in self._waiting.items()
                     if other < ticket and now - since >= self.max_wait_s]
        if not protected:
            return None
        need, alone = self._asks[min(protected)]
        return -1 if alone or need > self.capacity else self.capacity - need

    def _may_start(self, ticket: tuple[float, int], need: int, alone: bool,
                   now: float) -> bool | str:
        room = self._backfill_room(ticket, now)
        if room is not None and self.shared is not None:
            return False  # a host budget (shared with other processes' ledgers): no backfill
        if room is not None:
            # An old waiter is not overtaken any more, except by a task that fits in the room
            # it leaves beside itself, counted with every such task still running: once the
            # tasks that held the GPU before it finish, it fits whatever those hold (it is
            # never held back by them), and meanwhile the GPU does not drain idle.
            backfill = sum(g.need for g in self._active if g.backfill)
            if alone or need > self.capacity or self._alone or backfill + need > room or \
                    self.used + need > self.capacity:
                return False
            return "backfill"
        if self.shared is not None and now - self._waiting[ticket] < self.max_wait_s:
            others = self.shared.others()  # what other processes on this machine hold
            if others and self.used + need + others > self.capacity:
                return False
        if self.holders == 0:
            return True  # alone on the GPU: always runs (the oldest waiter always can)
        if self._alone or alone or need > self.capacity:
            return False
        return self.used + need <= self.capacity

    def acquire(self, need: int, *, alone: bool = False, since: float | None = None) -> Grant:
        """``since``: when the task first asked (a retry keeps its place: ahead of tasks that
        asked later, and protected from them once that is ``max_wait_s`` ago)."""
        start = time.monotonic()
        with self._cond:
            # a host budget keeps its own rule on other processes' holdings: no back-dating
            first = start if since is None or self.shared is not None else min(since, start)
            ticket = (first, next(self._tickets))
            self._tick(start)
            self._waiting[ticket] = first
            self._asks[ticket] = (need, alone)
            try:
                while not (verdict := self._may_start(ticket, need, alone, time.monotonic())):
                    # wake up in time to notice that an older waiter became protected, or
                    # (a budget shared with other processes, whose releases notify no one
                    # here) that their holdings fell
                    self._cond.wait(timeout=SHARED_POLL_S if self.shared is not None else
                                    max(0.05, min(self.max_wait_s, 5.0)))
                    self._tick()
            finally:
                self._tick()
                del self._waiting[ticket], self._asks[ticket]
            grant = Grant(need, alone or need > self.capacity, time.monotonic() - start,
                          asked_alone=alone, backfill=verdict == "backfill")
            self.backfills += grant.backfill
            if self._active:
                grant.shared = True
                for other in self._active:
                    other.shared = True
            self._active.add(grant)
            self.peak_holders = max(self.peak_holders, self.holders)
            self.used += need
            if self.shared is not None:
                self.shared.set(self.used)
            self._alone = grant.alone
            self._cond.notify_all()
        return grant

    def release(self, grant: Grant) -> None:
        with self._cond:
            self._tick()
            self._active.discard(grant)
            self.used -= grant.need
            if self.shared is not None:
                self.shared.set(self.used)
            if grant.alone:
                self._alone = False
            self._cond.notify_all()

    def shrink(self, grant: Grant, need: int) -> None:
        """Keep holding ``grant`` for ``need`` bytes (no more than it holds: growing would wait,
        and a task that waits while it holds can deadlock with another); the rest goes back.
        ``grant.shared`` starts again from whether another task holds the budget now."""
        with self._cond:
            self._tick()
            if grant not in self._active:
                raise ValueError("shrink: this grant is not held")
            need = max(0, min(int(need), grant.need))
            self.used -= grant.need - need
            grant.need = need
            if grant.alone and not grant.asked_alone and need <= self.capacity:
                grant.alone = self._alone = False  # it fits beside others now
            grant.shared = self.holders > 1
            if self.shared is not None:
                self.shared.set(self.used)
            self._cond.notify_all()

    @contextmanager
    def hold(self, need: int, *, alone: bool = False, since: float | None = None):
        grant = self.acquire(need, alone=alone, since=since)
        try:
            yield grant
        finally:
            self.release(grant)


# A capped run that ran out of memory is run again beside the others first, asking this many
# times its cap (and capped at that grant), before a rerun alone: a CUDA-graph-timed replay of a
# convolution keeps each graph's cuDNN workspace in that graph's private pool, 3-8x the live
# tensors a meta estimate sees (H200, KernelBench): 14 such replays of levels 1-3 reran alone,
# each after a wait of 130-275 s and a drain of the GPU.
RETRY_GROWTH = 2.0


@dataclass
class Admitted:
    """The outcome of ``run_admitted``."""

    result: Any
    need: int | None = None
    waited_s: float = 0.0
    retried_larger: bool = False  # rerun beside the others with a larger grant and cap
    retried_alone: bool = False
    too_large: bool = False
    notes: list[str] = field(default_factory=list)

    def memory_info(self) -> dict:
        return {"need_bytes": self.need, "waited_s": round(self.waited_s, 3),
                "retried_larger": self.retried_larger, "retried_alone": self.retried_alone,
                "too_large": self.too_large}


GpuBudget = MemoryBudget


def run_admitted(budget: MemoryBudget | None, estimate: int | None, run: Callable[[], Any],
                 out_of_memory: Callable[[Any], bool]) -> Admitted:
    """``run()`` once admitted on ``budget``; rerun alone on out-of-memory while sharing;
    ``too_large`` when it ran out of memory alone. Without a budget (CPU), just ``run()``."""
    with Tenancy(budget) as tenancy:
        return tenancy.run(estimate, run, out_of_memory)


class Tenancy:
    """One problem's hold on a budget across the workers it runs one after the other.

    ``run(estimate, run, out_of_memory)`` is ``run_admitted`` for one worker; a later ``run``
    whose ask fits in the grant still held keeps it (shrunk to its ask) and starts at once,
    instead of queueing again behind newer problems. One that asks for more gives the grant
    back and queues. A rerun alone (out of memory while sharing) gives its grant back after.
    Leaving the ``with`` block (or ``close``) gives back what is held.

    ``caps``: each run is told a cap (``cap``: ``CAP_FACTOR`` times its grant, read by the
    ``run`` callable while it runs) to hold its worker's allocator to
    (``probe_device.cap_memory``), so a worker's cache cannot grow into the whole GPU (a replay's cache reached 78 GiB of an H100
    whose other workers then had to fit beside it). A capped run that went out of memory (its
    cap, not the GPU, may have been what it met) runs again beside the others with a grant of
    ``RETRY_GROWTH`` times that cap, and that grant as its cap, when that is at most half the
    budget; if that fails too (or a library error it may cause), or is larger, it is rerun alone
    uncapped (``cap`` None). A retry keeps its run's place in the queue (when the run asked)."""

    def __init__(self, budget: MemoryBudget | None, *, caps: bool = False):
        self.budget = budget
        self.grant: Grant | None = None
        self.caps = caps
        self.cap: int | None = None

    def __enter__(self) -> Tenancy:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self.grant is not None and self.budget is not None:
            self.budget.release(self.grant)
        self.grant = None

    def _admit(self, need: int) -> float:
        """Hold ``need`` bytes; the seconds waited for them."""
        if self.grant is not None and need <= self.grant.need:
            self.budget.shrink(self.grant, need)
            return 0.0
        self.close()
        self.grant = self.budget.acquire(need)
        return self.grant.waited_s

    def run(self, estimate: int | None, run: Callable[[], Any],
            out_of_memory: Callable[[Any], bool],
            maybe_memory: Callable[[Any], bool] | None = None) -> Admitted:
        """``maybe_memory``: failures that memory pressure can cause without saying so (a
        library's internal error when its workspace could not be allocated): rerun alone when
        they happened while sharing, and kept as they are (never ``too_large``) when alone."""
        budget = self.budget
        if budget is None:
            return Admitted(run())
        asked = time.monotonic()  # this run's place in the queue, kept by its retries
        need = budget.need_for(estimate)
        admitted = Admitted(None, need=need, waited_s=self._admit(need))
        cap = int(need * CAP_FACTOR)
        self.cap = cap if self.caps and cap < budget.capacity else None
        admitted.result = run()
        oom = out_of_memory(admitted.result)
        if not oom and not (maybe_memory is not None and maybe_memory(admitted.result)):
            return admitted
        if not self.grant.shared and self.cap is None:
            admitted.too_large = oom
            return admitted
        larger = int(self.cap * RETRY_GROWTH) if oom and self.cap is not None else 0
        if larger and larger <= budget.capacity // 2:
            log.info("%s: out of memory under its cap of %.3g GiB; running again beside the "
                     "others with %.3g GiB", budget.name, self.cap / 2**30, larger / 2**30)
            self.close()
            self.grant = budget.acquire(larger, since=asked)
            admitted.waited_s += self.grant.waited_s
            # capped at its grant: a run known to exceed its estimate holds what it is counted for
            self.cap = larger
            admitted.result = run()
            admitted.retried_larger = True
            if not out_of_memory(admitted.result) and \
                    not (maybe_memory is not None and maybe_memory(admitted.result)):
                return admitted
        log.info("%s: out of memory while sharing the GPU or under its cap; rerunning alone",
                 budget.name)
        self.close()
        self.cap = None
        with budget.hold(need, alone=True, since=asked) as again:
            admitted.result = run()
        admitted.retried_alone = True
        admitted.waited_s += again.waited_s
        admitted.too_large = out_of_memory(admitted.result)
        return admitted


_BUDGETS: dict[Any, GpuBudget | None] = {}
# A folder whose ledgers the GPU budgets of sibling processes share (``HostLedger``, one per
# GPU): set for the grading processes of ``process_backend.ProcessBackend``
GPU_LEDGER_VAR = "KERNELMILL_GPU_LEDGER"
_REGISTRY = threading.Lock()


def read_gpu_memory(slot: dict, timeout_s: float = 120.0) -> tuple[int, int] | None:
    """(free, total) bytes of the slot's GPU: from ``nvidia-smi`` where it answers, else read
    in a tiny worker pinned like the real ones (the parent never opens a CUDA context of its
    own); None when it cannot be read."""
    from .gpus import gpu_memory
    from .harness import run_in_worker

    read = gpu_memory(slot.get("device", "cuda:0"), slot.get("env"))
    if read is not None:
        return read

    result = run_in_worker("kernelmill.validate.memory:device_memory", {}, timeout_s=timeout_s,
                           device=slot.get("device", "cuda:0"), env=slot.get("env") or {},
                           sandbox=False)
    if not result.ok:
        log.warning("gpu %s: free memory unknown (%s); admitting without a budget",
                    slot.get("gpu"), (result.error or {}).get("message"))
        return None
    return int(result.value["free"]), int(result.value["total"])


def budget_for(slot: dict, read: Callable[[dict], tuple[int, int] | None] = read_gpu_memory
               ) -> GpuBudget | None:
    """The budget of the slot's physical GPU (made on first use); None on CPU or when the GPU's
    memory could not be read."""
    gpu = slot.get("gpu")
    if gpu is None:
        return None
    with _REGISTRY:
        if gpu not in _BUDGETS:
            sizes = read(slot)
            folder = os.environ.get(GPU_LEDGER_VAR)
            if sizes is not None and folder:  # shared with the sibling processes' budgets:
                # what they hold is not free now, but is this budget's to share
                from .host_admission import HostLedger

                ledger = HostLedger(Path(folder) / f"gpu{gpu}")
                free, total = sizes
                _BUDGETS[gpu] = GpuBudget(min(free + ledger.others(), total), total,
                                          name=f"gpu{gpu}", shared=ledger)
            else:
                _BUDGETS[gpu] = None if sizes is None else GpuBudget(*sizes, name=f"gpu{gpu}")
        return _BUDGETS[gpu]


def gpu_occupancies() -> list[dict]:
    """``occupancy()`` of every GPU budget this process made (one per physical GPU)."""
    with _REGISTRY:
        budgets = [b for key, b in _BUDGETS.items() if b is not None and not isinstance(key, tuple)]
    return [b.occupancy() for b in budgets]


def occupancy_line(occ: dict) -> str:
    """One line saying where a GPU budget's time went."""
    wall = max(occ["wall_s"], 1e-9)

    def pct(key: str) -> str:
        return f"{100 * occ[key] / wall:.0f}%"

    return (f"{occ['name']}: {occ['wall_s']:.1f} s; held by several tasks {pct('several_s')}, "
            f"by one {pct('one_holder_s')} (alone, by its size: {pct('alone_s')}), by none "
            f"{pct('empty_s')} (while tasks waited: {pct('idle_waiting_s')}); draining for an "
            f"old waiter {pct('draining_s')}; mean fill {100 * occ['mean_fill']:.0f}% of "
            f"{occ['capacity_gib']} GiB; at most {occ['peak_holders']} tasks at once; "
            f"{occ.get('backfills', 0)} started beside a protected waiter")


def reset_budgets() -> None:
    """Forget every budget (a new run re-reads the free memory)."""
    with _REGISTRY:
        for budget in _BUDGETS.values():
            if budget is not None and budget.shared is not None:
                budget.shared.close()
        _BUDGETS.clear()


__all__ = ["Admitted", "GpuBudget", "Grant", "MemoryBudget", "Tenancy", "budget_for",
           "gpu_occupancies", "occupancy_line", "read_gpu_memory", "reset_budgets",
           "run_admitted"]
