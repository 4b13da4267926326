"""A grade's candidate workers started beside its reference run (``KERNELMILL_EARLY_CANDIDATES``).

A candidate's worker spends its first 1.2 s (singles) to 2.5 s (groups of 8) on what needs no
input: its process, its CUDA context, its confinement (KernelBench on one H100, 9-12% of a
grade's reference and candidate phases). Started as the grade's reference run starts, it does
that meanwhile and waits for its payload (``validate.deferred_payload``): the job ``_prepare``
makes once the reference run is in is given to it where it would have started a worker. A job
that needs another start (an extension build's folder and environment, other limits) withdraws
the early worker and starts its own, as does a member decided before it runs; a grade whose
reference fails withdraws them all. Nothing of a submission runs before its payload: the worker
imports its target only then.

An A/B switch for the GPU runs (``off``, the default; ``on``) until one says what it gains.
"""
from __future__ import annotations

import threading
import time

from kernelmill.core.errors import env_choice
from kernelmill.validate.deferred_payload import DeferredPayload
from kernelmill.validate.harness import Control, WorkerResult, run_in_worker

EARLY_VAR = "KERNELMILL_EARLY_CANDIDATES"
EARLY_MODES = ("off", "on")
CANDIDATE_TARGET = "kernelmill.grade.worker:candidate_task"
# what a worker is started with: a job that differs in any of these needs a start of its own
SPAWN_KEYS = ("target", "timeout_s", "device", "env", "writable", "sandbox", "hidden",
              "init_lock", "limits")
JOIN_S = 30.0  # the longest a grade waits for its withdrawn workers (each ends at its wait)


def early_candidates() -> bool:
    """Whether a grade starts its candidates' workers beside its reference run (``EARLY_VAR``;
    an unknown value is an error)."""
    return env_choice(EARLY_VAR, EARLY_MODES) == "on"


class EarlyWorker:
    """One candidate worker started before its payload (``run_in_worker`` in a thread)."""

    def __init__(self, job: dict):
        self.job = job  # its ``SPAWN_KEYS``
        self.control = Control()
        self.deferred = DeferredPayload()
        self.result: WorkerResult | None = None
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name="kernelmill-early-candidate")
        self._thread.start()

    def _run(self) -> None:
        try:
            self.result = run_in_worker(**self.job, payload=self.deferred, control=self.control)
        except Exception as exc:  # noqa: BLE001 — becomes this member's failed run
            self.result = WorkerResult(False, error={
                "stage": "spawn", "message": f"{type(exc).__name__}: {exc}"[:500]})
        finally:
            self.control._end()

    def fits(self, job: dict) -> bool:
        """``job`` may run in this worker: it was started with the same ``SPAWN_KEYS`` and
        the job holds nothing else but its payload and late parts (a key of another kind
        needs a start of its own)."""
        return set(job) <= {*SPAWN_KEYS, "payload", "late"} and \
            all(job.get(key) == self.job.get(key) for key in SPAWN_KEYS)

    def run(self, job: dict) -> WorkerResult:
        """``job``'s run (as ``run_in_worker(**job, control=self.control)``): its payload and
        late parts given to this worker, its result once it ends."""
        self.deferred.give(job["payload"], job.get("late"))
        self._thread.join()
        return self.result

    def withdraw(self) -> None:
        self.deferred.cancel()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)


class EarlyWorkers:
    """A grade's early workers, one per member still to run, in the members' order; each taken
    by the member whose job fits it (``take``), the rest withdrawn (``close``)."""

    def __init__(self, job: dict, members: int):
        self.workers: list[EarlyWorker] = []
        self._taken: set[int] = set()
        try:
            for _ in range(members):
                self.workers.append(EarlyWorker(dict(job)))
        except BaseException:  # (a thread that cannot start) none left waiting
            self.close()
            raise

    def take(self, index: int, job: dict) -> EarlyWorker | None:
        """Member ``index``'s early worker where ``job`` fits it (its own start otherwise:
        the early one withdrawn)."""
        if not 0 <= index < len(self.workers) or index in self._taken:
            return None
        worker = self.workers[index]
        self._taken.add(index)
        if worker.fits(job):
            return worker
        worker.withdraw()
        return None

    def close_untaken(self) -> None:
        """Every worker no member took withdrawn (its member was decided before it ran)."""
        for index, worker in enumerate(self.workers):
            if index not in self._taken:
                self._taken.add(index)
                worker.withdraw()

    def close(self) -> None:
        """Every worker not taken withdrawn, and all of them waited for (bounded)."""
        for worker in self.workers:
            worker.withdraw()  # (a taken one was given its payload: nothing)
        until = time.monotonic() + JOIN_S
        for worker in self.workers:
            worker.join(max(0.0, until - time.monotonic()))
