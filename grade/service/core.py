"""The grading service without its HTTP: configuration, submissions checked and keyed, the job
table, and the dispatcher that hands groups to the pool's actors.

``Service.submit`` turns a request's submissions into entries (``jobs.Entry``): the verdict
key (``grade.batch.verdict_key``, so the batch grader's cache and the service agree on what
"the same submission" is), the problem that groups it, and the payload an actor grades. The
dispatcher takes one group at a time as an actor has room, least-busy actor first: each actor
grades in ``pool.per_actor`` slots at once, a single taking one and a group of n members
``group_slots(n)`` (its members share one reference worker and one timing window). A group whose
actor died is requeued (``JobTable.requeue``), and every job is answered once.
"""
from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os

from kernelmill.validate.backends import resolve_device

from ..batch import VerdictCache, verdict_key
from ..retry import transient
from ..rewards import get_reward
from .actors import ActorLost, LocalPool, RayPool
from .config import ServeConfig
from .jobs import Entry, JobTable, group_slots
from .metrics import Metrics

log = logging.getLogger("kernelmill")


class Service:
    def __init__(self, config: ServeConfig, pool=None):
        self.config = config
        self.pool = pool
        self.problems: dict[str, dict] = {}
        self.table: JobTable | None = None
        self.metrics: Metrics | None = None
        self.cache: VerdictCache | None = None
        self.busy: list[int] = []
        self.device = config.device
        self.token = config.token if config.token is not None else \
            os.environ.get("KERNELMILL_TOKEN") or None
        self._tasks: set[asyncio.Task] = set()
        self._rejoining: set[int] = set()  # lost actors being waited for (``_rejoin``)

    # -- life --------------------------------------------------------------------------------
    async def start(self) -> None:
        config = self.config
        get_reward(config.reward)  # an unknown name fails now
        self.device = resolve_device(config.device)
        if config.dataset:
            from ..problems import load_problems

            self.problems = await asyncio.to_thread(load_problems, config.dataset, config.split)
        if self.pool is None:
            self.pool = self._build_pool()
        await self.pool.start()
        self.busy = [0] * self.pool.size
        self.cache = VerdictCache(config.cache) if config.cache else None
        self.table = JobTable(max_queued=config.queue, group_size=config.group,
                              max_attempts=config.max_attempts,
                              group_wait_s=config.group_wait_s)
        self.table.actors, self.table.per_actor = self.pool.size, max(1, self.pool.per_actor)
        self.metrics = Metrics(self.table, self.busy, self.pool.alive)
        self.table.on_answer = self.metrics.answered
        self._spawn(self._dispatch())
        self._spawn(self._expire())
        log.info(f"serve: {self.pool.size} actor(s) on {self.device}, "
                 f"{len(self.problems)} problem(s)")

    def _build_pool(self):
        config = self.config
        common = {"dataset": config.dataset, "split": config.split, "device": self.device,
                  "policy": config.policy, "reward": config.reward, "actors": config.actors}
        if config.backend == "local":
            return LocalPool(**common, per_actor=config.per_actor)
        return RayPool(**common, address=config.address, per_actor=config.per_actor,
                       running=config.running)

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self.pool is not None:
            await asyncio.to_thread(self.pool.close)
        if self.cache is not None:
            self.cache.close()

    def _spawn(self, coroutine) -> asyncio.Task:
        task = asyncio.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- submitting --------------------------------------------------------------------------
    def entry(self, submission: dict) -> Entry:
        """One submission checked and keyed; ``ValueError`` names what is wrong with it."""
        if not isinstance(submission, dict):
            raise ValueError("a submission is a JSON object")
        source = submission.get("source")
        if not isinstance(source, str):
            raise ValueError("a submission needs source (a string)")
        pid, reference = submission.get("problem_id"), submission.get("reference")
        pid = None if pid is None else str(pid)
        problem = self.problems.get(pid) if pid is not None else None
        if problem is not None:
            payload = {"problem_id": pid, "source": source}
            group = f"id:{pid}"
        elif isinstance(reference, str):
            record = submission.get("record") if isinstance(submission.get("record"), dict) \
                else {}
            problem = {"source": reference, "validation": record.get("validation") or {}}
            group = "ref:" + hashlib.sha256(json.dumps(problem, sort_keys=True, default=str)
                                            .encode()).hexdigest()[:24]
            payload = {"reference": reference, "record": {"validation": problem["validation"]},
                       "source": source}
        elif pid is not None:
            return Entry(key="", problem=f"id:{pid}", payload={},
                         error=f"unknown problem id {pid} (the service serves "
                               f"{len(self.problems)} problem(s))")
        else:
            raise ValueError("a submission needs problem_id or reference")
        key = verdict_key(source, problem, self.device, self.config.policy)
        cached = self.cache.get(key) if self.cache is not None else None
        verdict = None
        if cached is not None:
            verdict = {**cached, "reward": float(get_reward(self.config.reward)(cached)),
                       "cached": True}
        return Entry(key=key, problem=group, payload=payload, verdict=verdict)

    def submit(self, submissions: list, deadline_s: float | None = None) -> list[str]:
        """Job ids, one per submission (``ValueError``: a bad request; ``QueueFull``)."""
        if not isinstance(submissions, list) or not submissions:
            raise ValueError("submissions must be a non-empty list")
        if len(submissions) > self.config.max_submissions:
            raise ValueError(f"{len(submissions)} submissions in one request (at most "
                             f"{self.config.max_submissions})")
        entries = []
        for index, submission in enumerate(submissions):
            try:
                entries.append(self.entry(submission))
            except ValueError as exc:
                raise ValueError(f"submission {index}: {exc}") from None
        try:
            deadline = self.config.deadline_s if deadline_s is None else float(deadline_s)
        except (TypeError, ValueError):
            raise ValueError(f"deadline_s must be a number, not {deadline_s!r}") from None
        if not 0 < deadline <= 86400:
            raise ValueError("deadline_s must be in (0, 86400]")
        before = self.table.deduplicated
        ids = self.table.submit(entries, deadline)
        self.metrics.submitted.inc(len(entries))
        self.metrics.deduplicated.inc(self.table.deduplicated - before)
        return ids

    # -- dispatching -------------------------------------------------------------------------
    async def _dispatch(self) -> None:
        per_actor = max(1, self.pool.per_actor)

        def fits(members: int) -> bool:
            return self._least_busy(group_slots(members, per_actor), per_actor) is not None

        while True:  # a group is taken only when an actor has room for it
            group = await self.table.take(fits)
            slots = group_slots(len(group), per_actor)
            index = self._least_busy(slots, per_actor)
            self.busy[index] += slots
            for job in group:
                job.actor = index
            self._spawn(self._grade(index, group, slots))

    def _least_busy(self, slots: int, per_actor: int) -> int | None:
        """The actor with the fewest slots taken among those with ``slots`` free (or none
        taken) and not being restarted, if any is; None where none has room now."""
        usable = getattr(self.pool, "usable", lambda index: True)
        indices = [i for i in range(len(self.busy)) if usable(i)] or range(len(self.busy))
        room = [i for i in indices if self.busy[i] == 0 or self.busy[i] + slots <= per_actor]
        return min(room, key=self.busy.__getitem__) if room else None

    async def _grade(self, index: int, group: list, slots: int) -> None:
        try:
            verdicts = await self.pool.grade(index, [{"job": j.id, **j.payload} for j in group])
        except ActorLost as exc:
            log.warning(f"serve: {exc}; its {len(group)} job(s) requeued")
            before = self.table.requeued
            self.table.requeue(group, str(exc))
            self.metrics.requeued.inc(self.table.requeued - before)
            self._spawn(self._rejoin(index))
        except Exception as exc:  # noqa: BLE001 — each job hears why; the service goes on
            for job in group:
                self.table.fail(job, f"{type(exc).__name__}: {exc}")
        else:
            for job, verdict in zip(group, verdicts):
                if self.table.finish(job, verdict) and self.cache is not None and \
                        not verdict.get("reference_failed") and not transient(verdict):
                    self.cache.put(job.key, verdict)
        finally:
            self.busy[index] -= slots
            self.table.work.set()  # room freed: the dispatcher looks again

    async def _rejoin(self, index: int, every_s: float = 5.0) -> None:
        """Actor ``index`` was lost: once it answers again (Ray restarted it) the dispatcher
        may hand it groups again. Only a grade sent to it would find out otherwise, and none is
        while another actor is usable."""
        recovered = getattr(self.pool, "wait_recovered", None)
        recovering = getattr(self.pool, "recovering", set())
        if recovered is None or index in self._rejoining:
            return
        self._rejoining.add(index)
        try:
            while index in recovering:
                try:
                    await recovered(index)
                except ActorLost as exc:
                    log.warning(f"serve: {exc}; trying again")
                    await asyncio.sleep(every_s)
        finally:
            self._rejoining.discard(index)
            self.table.work.set()

    async def _expire(self, every_s: float = 0.25) -> None:
        while True:
            await asyncio.sleep(every_s)
            self.table.expire()

    # -- reading -----------------------------------------------------------------------------
    def health(self) -> dict:
        table = self.table
        return {"status": "ok", "device": self.device, "actors": self.pool.alive(),
                "busy": list(self.busy), "problems": len(self.problems),
                "queued": table.queued, "running": table.running,
                "answered": len(table.answered), "requeued": table.requeued,
                "joined": table.joined,
                "p50_s": table.percentile(0.5), "p95_s": table.percentile(0.95)}
