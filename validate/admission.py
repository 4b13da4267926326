"""Memory-aware admission: start a GPU worker only when its memory fits on its GPU.

Each physical GPU has one ``GpuBudget``: the free memory read once when the first task asks
(less a margin), shared by every thread of this process that validates on that GPU. A task asks
for the peak bytes its worker will hold (``memory.probe_bytes``); it starts when that fits in
what the running tasks left, and waits otherwise. Three rules keep it live:

- a task alone on its GPU always starts, whatever it asked (so nothing waits forever);
- a task that asks for more than the whole budget (or for ``alone``) waits until the GPU is
  empty and keeps it to itself;
- a task that has waited ``max_wait_s`` is not overtaken any more: newer tasks wait behind it
  until it has started (smaller ones may fill the gaps before that).

``run_admitted`` wraps one worker run: admission, then a rerun alone when it still went out of
memory while it shared the GPU, and ``too_large`` when it went out of memory alone.
Unknown estimates count as ``unknown_fraction`` of the budget.
"""
from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("kernelmill")

MARGIN = 0.10  # of the free memory, kept back for fragmentation and what estimates miss
UNKNOWN_FRACTION = 0.5


# Measured on an H100 (2026-11-23, 15 KernelBench level 1-3 problems): the probe's
# max_memory_reserved over the live-bytes estimate had median 1.30 and max 2.69 (a ConvTranspose3d
# with a cuDNN workspace). Asking for 1.35x covers the typical problem; the rarer ones that still
# run out of memory while sharing are rerun alone.
ALLOCATOR_FACTOR = 1.35


@dataclass(eq=False)
class Grant:
    need: int
    alone: bool
    waited_s: float = 0.0
    shared: bool = False  # another task held the same GPU at some time while this one did


class GpuBudget:
    """Bytes of one GPU shared by the tasks of this process (see the module docstring)."""

    def __init__(self, free_bytes: int, total_bytes: int | None = None, *, margin: float = MARGIN,
                 unknown_fraction: float = UNKNOWN_FRACTION, max_wait_s: float = 120.0,
                 name: str = "gpu"):
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
        self._waiting: dict[int, float] = {}  # ticket -> when it began to wait

    def need_for(self, estimate: int | None) -> int:
        """What a task with this estimate asks for (unknown: a large share of the budget). The
        estimate counts live tensor bytes; the caching allocator reserves more (rounded blocks,
        cached segments, library workspaces), so the ask is the estimate times
        ``ALLOCATOR_FACTOR``."""
        return self.unknown_need if estimate is None else int(estimate * ALLOCATOR_FACTOR)

    @property
    def holders(self) -> int:
        return len(self._active)

    def _may_start(self, ticket: int, need: int, alone: bool, now: float) -> bool:
        for other, since in self._waiting.items():  # an old waiter is not overtaken any more
            if other < ticket and now - since >= self.max_wait_s:
                return False
        if self.holders == 0:
            return True  # alone on the GPU: always runs (the oldest waiter always can)
        if self._alone or alone or need > self.capacity:
            return False
        return self.used + need <= self.capacity

    def acquire(self, need: int, *, alone: bool = False) -> Grant:
        start = time.monotonic()
        with self._cond:
            ticket = next(self._tickets)
            self._waiting[ticket] = start
            try:
                while not self._may_start(ticket, need, alone, time.monotonic()):
                    # wake up in time to notice that an older waiter became protected
                    self._cond.wait(timeout=max(0.05, min(self.max_wait_s, 5.0)))
            finally:
                del self._waiting[ticket]
            grant = Grant(need, alone or need > self.capacity, time.monotonic() - start)
            if self._active:
                grant.shared = True
                for other in self._active:
                    other.shared = True
            self._active.add(grant)
            self.peak_holders = max(self.peak_holders, self.holders)
            self.used += need
            self._alone = grant.alone
            self._cond.notify_all()
        return grant

    def release(self, grant: Grant) -> None:
        with self._cond:
            self._active.discard(grant)
            self.used -= grant.need
            if grant.alone:
                self._alone = False
            self._cond.notify_all()

    @contextmanager
    def hold(self, need: int, *, alone: bool = False):
        grant = self.acquire(need, alone=alone)
        try:
            yield grant
        finally:
            self.release(grant)


@dataclass
class Admitted:
    """The outcome of ``run_admitted``."""

    result: Any
    need: int | None = None
    waited_s: float = 0.0
    retried_alone: bool = False
    too_large: bool = False
    notes: list[str] = field(default_factory=list)

    def memory_info(self) -> dict:
        return {"need_bytes": self.need, "waited_s": round(self.waited_s, 3),
                "retried_alone": self.retried_alone, "too_large": self.too_large}


def run_admitted(budget: GpuBudget | None, estimate: int | None, run: Callable[[], Any],
                 out_of_memory: Callable[[Any], bool]) -> Admitted:
    """``run()`` once admitted on ``budget``; rerun alone on out-of-memory while sharing;
    ``too_large`` when it ran out of memory alone. Without a budget (CPU), just ``run()``."""
    if budget is None:
        return Admitted(run())
    need = budget.need_for(estimate)
    with budget.hold(need) as grant:
        result = run()
    admitted = Admitted(result, need=need, waited_s=grant.waited_s)
    if not out_of_memory(result):
        return admitted
    if not grant.shared:
        admitted.too_large = True
        return admitted
    log.info("%s: out of memory while sharing the GPU; rerunning alone", budget.name)
    with budget.hold(need, alone=True) as again:
        admitted.result = run()
    admitted.retried_alone = True
    admitted.waited_s += again.waited_s
    admitted.too_large = out_of_memory(admitted.result)
    return admitted


_BUDGETS: dict[Any, GpuBudget | None] = {}
_REGISTRY = threading.Lock()


def read_gpu_memory(slot: dict, timeout_s: float = 120.0) -> tuple[int, int] | None:
    """(free, total) bytes of the slot's GPU, read in a tiny worker pinned like the real ones
    (the parent never opens a CUDA context of its own); None when it cannot be read."""
    from .harness import run_in_worker

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
            _BUDGETS[gpu] = None if sizes is None else GpuBudget(*sizes, name=f"gpu{gpu}")
        return _BUDGETS[gpu]


def reset_budgets() -> None:
    """Forget every budget (a new run re-reads the free memory)."""
    with _REGISTRY:
        _BUDGETS.clear()


__all__ = ["Admitted", "GpuBudget", "Grant", "budget_for", "read_gpu_memory", "reset_budgets",
           "run_admitted"]
