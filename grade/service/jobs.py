"""The service's jobs: a bounded queue of problem groups, each job answered exactly once.

A job is one submission to grade, named by an id the client polls. Its life:
``queued -> running -> done`` (a verdict) or ``error`` (the service could not grade it: the
deadline passed, or the actor grading it died twice). ``finish`` and ``fail`` answer a job
only while it is not yet answered, so a late result (an actor that comes back after the job's
deadline, a re-run after a requeue) is dropped, never delivered twice.

Idempotency is by the verdict-cache key (``grade.batch.verdict_key``: the exact source, the
problem, the device, the policy and the grader's versions): a submission whose key has a live
or answered job gets that job's id back, not a new grade. A job that ended in ``error`` leaves
the index, so submitting it again grades it again.

Submissions of one problem are queued as one group (at most ``group_size``), graded together by
``grade.batch.grade_group_items`` (one reference worker, one timing window for all), whether they
come in one request or in several: a request's submissions first join their problem's newest
group still queued. A group opened by a request with one submission of its problem, not yet
full, is held back at most ``group_wait_s`` from its first submission for more of it (the
groups behind it go meanwhile), so a trainer that sends each sample of a GRPO group in a
request of its own (verl's per-sample ``compute_score`` in parallel) is graded as a group, not
as singles. The table is used from one asyncio loop; it takes no locks.
"""
from __future__ import annotations

import asyncio
import itertools
import math
import secrets
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

FINAL = ("done", "error")


def group_slots(members: int, per_actor: int) -> int:
    """The slots of an actor a group of ``members`` takes: half its members, rounded up (the
    batch grades 16 singles or 4 groups of 8 at once per GPU), never more than the actor has."""
    return max(1, min(per_actor, -(-members // 2)))


class QueueFull(Exception):
    """The request would take the queue over its bound; retry after ``retry_after`` seconds."""

    def __init__(self, retry_after: int):
        super().__init__(f"queue full; retry after {retry_after}s")
        self.retry_after = retry_after


@dataclass
class Job:
    id: str
    key: str
    problem: str  # what groups jobs: the problem id, or a digest of the reference
    payload: dict  # what the actor grades: source, and problem_id or reference (+ record)
    submitted: float
    deadline: float
    status: str = "queued"
    verdict: dict | None = None
    error: str | None = None
    attempts: int = 0  # dispatches so far
    actor: int | None = None
    started: float | None = None  # last dispatched
    finished: float | None = None
    answered: asyncio.Event = field(default_factory=asyncio.Event, repr=False)

    def view(self) -> dict:
        out = {"id": self.id, "status": self.status, "verdict": self.verdict}
        if self.error is not None:
            out["error"] = {"stage": "service", "message": self.error}
        if self.status == "running":
            out["actor"] = self.actor
        return out


class _Group(list):
    """A queued group of one problem's jobs; ``more``: it may wait for more of them."""

    def __init__(self, jobs: list[Job], more: bool = False):
        super().__init__(jobs)
        self.more = more


@dataclass
class Entry:
    """One submission of a request, checked and keyed (``app`` builds them)."""
    key: str
    problem: str
    payload: dict
    verdict: dict | None = None  # answered already (a cached verdict, an unknown problem)
    error: str | None = None


class JobTable:
    """Jobs by id, the index by key, and the queue of groups.

    max_queued: jobs waiting at most (a request that would exceed it is refused whole).
    group_size: most jobs of one problem graded together.
    group_wait_s: how long a group not yet full may wait, from its first submission, for more
        of its problem before it is dispatched (0: never held back).
    max_attempts: dispatches of a job whose actor died before it is answered as an error.
    keep: answered jobs kept for polling and idempotency (oldest forgotten first).
    on_answer: called once per answered job (metrics).
    """

    def __init__(self, *, max_queued: int = 1024, group_size: int = 8, max_attempts: int = 2,
                 keep: int = 100_000, on_answer: Callable[[Job], None] | None = None,
                 group_wait_s: float = 0.0):
        self.max_queued = max_queued
        self.group_size = max(1, group_size)
        self.group_wait_s = max(0.0, group_wait_s)
        self.max_attempts = max(1, max_attempts)
        self.keep = keep
        self.on_answer = on_answer or (lambda job: None)
        self.jobs: dict[str, Job] = {}
        self.by_key: dict[str, str] = {}
        self.groups: deque[_Group] = deque()
        # each problem's newest group still in the queue: later submissions of it join there
        self.filling: dict[str, _Group] = {}
        self.joined = 0  # jobs that joined a group an earlier request queued
        self.queued = 0
        self.running = 0
        self.deduplicated = 0
        self.requeued = 0
        self.late = 0  # results that came after their job was answered (dropped)
        self.answered: OrderedDict[str, None] = OrderedDict()
        self.open: dict[str, Job] = {}  # not yet answered
        self.work = asyncio.Event()
        self._ids = itertools.count()
        self._prefix = secrets.token_hex(4)
        self.seconds: deque[float] = deque(maxlen=2048)  # recent submit-to-answer times
        self.grading_seconds: deque[float] = deque(maxlen=256)  # dispatch to answer
        self.actors = self.per_actor = 1  # the pool's (the service sets them): for Retry-After

    # -- submitting ------------------------------------------------------------------------------
    def submit(self, entries: list[Entry], deadline_s: float) -> list[str]:
        """Job ids for ``entries``, in order: existing ones by key, new ones queued by problem.
        Raises ``QueueFull`` (nothing changed) when the new ones would not fit now, and
        ``ValueError`` when they never would."""
        now = time.monotonic()
        plan: list[str | tuple[Job, Entry]] = []
        fresh: dict[str, Job] = {}
        for entry in entries:
            if entry.error is None:
                existing = self.by_key.get(entry.key) or \
                    (fresh[entry.key].id if entry.key in fresh else None)
                if existing is not None:
                    plan.append(existing)
                    continue
            job = Job(f"{self._prefix}-{next(self._ids)}", entry.key, entry.problem,
                      entry.payload, now, now + deadline_s)
            if entry.error is None:
                fresh[entry.key] = job
            if entry.error is not None or entry.verdict is not None:
                job.status = "new"  # answered at once below, never queued
            plan.append((job, entry))
        new = [step for step in plan if isinstance(step, tuple)]
        waiting = [job for job, entry in new if entry.verdict is None and entry.error is None]
        if len(waiting) > self.max_queued:
            raise ValueError(f"{len(waiting)} new submissions in one request; the queue holds "
                             f"{self.max_queued}: send them in smaller requests")
        if waiting and self.queued + len(waiting) > self.max_queued:
            raise QueueFull(self.retry_after(len(waiting)))
        self.deduplicated += len(plan) - len(new)
        for job, entry in new:
            self.jobs[job.id] = job
            if entry.error is not None:
                self.fail(job, entry.error)
                continue
            self.by_key[job.key] = job.id
            if entry.verdict is not None:
                self.finish(job, entry.verdict)
        by_problem: dict[str, list[Job]] = {}
        for job in waiting:
            self.open[job.id] = job
            by_problem.setdefault(job.problem, []).append(job)
        for problem, jobs in by_problem.items():
            self._queue(problem, jobs)
        self.queued += len(waiting)
        if waiting:
            self.work.set()
        return [step if isinstance(step, str) else step[0].id for step in plan]

    def _queue(self, problem: str, jobs: list[Job]) -> None:
        """``jobs`` of one problem (one request's) into the queue: first into its newest group
        still queued, up to the group size, then in new groups. A group opened by a request
        with one submission of the problem may wait for more (``group_wait_s``); one opened by
        a request that sent several together goes as soon as it can."""
        one = len(jobs) == 1
        group = self.filling.get(problem)
        if group is not None:
            room = self.group_size - len(group)
            group.extend(jobs[:room])
            self.joined += len(jobs[:room])
            jobs = jobs[room:]
        for start in range(0, len(jobs), self.group_size):
            self.groups.append(_Group(jobs[start:start + self.group_size], more=one))
            self.filling[problem] = self.groups[-1]

    def retry_after(self, extra: int = 0) -> int:
        """Seconds a refused client should wait: the queue's length at the recent pace."""
        graded = self.grading_seconds
        recent = sorted(graded)[len(graded) // 2] if graded else 1.0  # one group's grade
        groups = self.actors * max(1, self.per_actor // group_slots(self.group_size,
                                                                     self.per_actor))
        estimate = (self.queued + extra) * recent / max(1, groups * self.group_size)
        return int(min(60, max(1, math.ceil(estimate))))

    # -- dispatching -----------------------------------------------------------------------------
    async def take(self, fits: Callable[[int], bool] | None = None) -> list[Job]:
        """The first group of the queue that is ready, once ``fits(members)`` says there is
        room for it (expired jobs are answered already; a group none of whose jobs wait is
        dropped). A group not yet full that may wait for more of its problem is not ready until
        ``group_wait_s`` from its first submission: the groups behind it go meanwhile. Waits on
        ``work``, which a submission, a requeue or freed room sets."""
        while True:
            index, left = self._ready()
            if index is not None:
                group = [j for j in self.groups[index] if j.status == "queued"]
                if fits is None or fits(len(group)):
                    self._remove(index)
                    for job in group:
                        job.status = "running"
                        job.attempts += 1
                        job.started = time.monotonic()
                    self.queued -= len(group)
                    self.running += len(group)
                    return group
                left = None  # no room for it yet: wait for some to be freed
            self.work.clear()
            if left is None:
                await self.work.wait()
                continue
            try:
                await asyncio.wait_for(self.work.wait(), left)
            except asyncio.TimeoutError:
                pass

    def _ready(self) -> tuple[int | None, float | None]:
        """The queue's first ready group's place, else None and the seconds until the first
        held one is ready (None: nothing queued)."""
        now, soonest = time.monotonic(), None
        index = 0
        while index < len(self.groups):
            group = self.groups[index]
            waiting = [j for j in group if j.status == "queued"]
            if not waiting:
                self._remove(index)
                continue
            left = self.group_wait_s - (now - min(j.submitted for j in waiting))
            held = group.more and left > 0 and \
                len(waiting) < self.group_size and self.filling.get(group[0].problem) is group
            if not held:
                return index, None
            soonest = left if soonest is None else min(soonest, left)
            index += 1
        return None, soonest

    def _remove(self, index: int) -> None:
        """Group ``index`` out of the queue; nothing joins it from now on."""
        group = self.groups[index]
        del self.groups[index]
        if self.filling.get(group[0].problem) is group:
            del self.filling[group[0].problem]

    def requeue(self, group: list[Job], why: str) -> None:
        """The group's actor died: each job still running goes back to the front of the queue,
        or, after ``max_attempts`` dispatches, is answered as an error."""
        again = []
        for job in group:
            if job.status != "running":
                continue
            if job.attempts >= self.max_attempts:
                self.fail(job, f"{why}; gave up after {job.attempts} attempts")
            else:
                self.running -= 1
                job.status, job.actor = "queued", None
                again.append(job)
        if again:
            self.requeued += len(again)
            self.queued += len(again)
            self.groups.appendleft(_Group(again))
            self.work.set()

    # -- answering -------------------------------------------------------------------------------
    def finish(self, job: Job, verdict: dict) -> bool:
        return self._answer(job, "done", verdict=verdict)

    def fail(self, job: Job, message: str) -> bool:
        return self._answer(job, "error", error=message)

    def _answer(self, job: Job, status: str, *, verdict: dict | None = None,
                error: str | None = None) -> bool:
        if job.status in FINAL:
            self.late += 1
            return False
        if job.status == "queued":
            self.queued -= 1
        elif job.status == "running":
            self.running -= 1
            self.grading_seconds.append(time.monotonic() - job.started)
        self.open.pop(job.id, None)
        job.status, job.verdict, job.error, job.finished = status, verdict, error, time.monotonic()
        if status == "error" and self.by_key.get(job.key) == job.id:
            del self.by_key[job.key]  # a failed grade may be asked for again
        self.seconds.append(job.finished - job.submitted)
        self.answered[job.id] = None
        try:
            self.on_answer(job)  # counted before anyone waiting sees the answer
        finally:
            job.answered.set()
        self._forget_old()
        return True

    def expire(self, now: float | None = None) -> int:
        """Answer every unanswered job past its deadline as an error; how many."""
        now = time.monotonic() if now is None else now
        late = [j for j in self.open.values() if j.deadline <= now]
        for job in late:
            self.fail(job, f"deadline of {job.deadline - job.submitted:.0f}s passed while "
                           f"{job.status}")
        return len(late)

    def _forget_old(self) -> None:
        while len(self.answered) > self.keep:
            job_id, _ = self.answered.popitem(last=False)
            job = self.jobs.pop(job_id, None)
            if job is not None and self.by_key.get(job.key) == job_id:
                del self.by_key[job.key]

    # -- reading ---------------------------------------------------------------------------------
    async def wait(self, ids: list[str], timeout_s: float) -> list[dict | None]:
        """The jobs' views once all are answered or ``timeout_s`` passed (None: unknown id)."""
        pending = [self.jobs[i].answered.wait() for i in ids
                   if i in self.jobs and self.jobs[i].status not in FINAL]
        if pending and timeout_s > 0:
            tasks = [asyncio.ensure_future(p) for p in pending]
            try:
                await asyncio.wait(tasks, timeout=timeout_s)
            finally:  # timed out, or the client went away: no waiter outlives the request
                for task in tasks:
                    task.cancel()
        else:
            for coroutine in pending:
                coroutine.close()
        return [self.jobs[i].view() if i in self.jobs else None for i in ids]

    def percentile(self, q: float) -> float | None:
        if not self.seconds:
            return None
        ordered = sorted(self.seconds)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
