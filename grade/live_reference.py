"""A fresh reference worker kept past its results to time the reference in its grade's window.

A grade on a GPU used three workers, each its own process, CUDA context and model: the fresh
reference run (the submission's secret weights and inputs, the reference outputs), the
candidate, and a reference timing worker built from the same seeds for the window. The driver
makes contexts one at a time, so the three queued for each other. Here the fresh reference's
worker delivers its results ahead (``harness_worker.deliver``) and stays: when the window is
about to open, the grader says ``time k`` and it times run ``k``'s reference (its model under
that run's seeds and base state, on that run's first inputs: what the timing worker was given),
then ends. A grade whose window never opens closes it untimed. It never sees candidate code.
"""
from __future__ import annotations

import dataclasses
import threading
import time

from kernelmill.validate.harness import Control, WorkerResult, run_in_worker


class LiveReference:
    """One fresh reference worker (``run_in_worker(**job)`` in a thread of its own) whose
    results come back ahead (``results``) and which then times one of its runs in a window
    (``time``) or ends untimed (``close``)."""

    def __init__(self, job: dict, timing_s: float):
        self.control = Control()
        self._timing_s = timing_s  # its time limit for the timing, granted once it delivered
        self._delivered: WorkerResult | None = None
        self._delivered_at: float | None = None
        self._final: WorkerResult | None = None
        self._results = threading.Event()
        self._asked = False
        self._thread = threading.Thread(target=self._run, args=(job,), daemon=True)
        self._thread.start()

    def _run(self, job: dict) -> None:
        try:
            self._final = run_in_worker(**job, control=self.control, early_results=True,
                                        on_delivered=self._got)
        except Exception as exc:  # noqa: BLE001 — becomes the run's failure
            self._final = WorkerResult(False, error={
                "stage": "spawn", "message": f"{type(exc).__name__}: {exc}"[:500]})
        finally:
            self.control._end()
            self._results.set()

    def _got(self, result: WorkerResult) -> None:
        self._delivered, self._delivered_at = result, time.monotonic()
        self.control.grant(self._timing_s)
        self._results.set()

    def results(self) -> WorkerResult:
        """The run's results as it delivered them, or its failure (it ended without)."""
        self._results.wait()
        return self._delivered if self._delivered is not None else self._final

    def time(self, index: int) -> bool:
        """Ask the worker to time run ``index`` in the window about to open (it asks for the
        GPU as a timing worker does); its wait since it delivered is not its time. False: it is
        gone, or was asked already."""
        if self._asked or self._delivered is None or self.control.ended:
            return False
        self._asked = True
        self.control.extend(time.monotonic() - self._delivered_at)
        return self.control.send(f"time {index}")

    def close(self) -> WorkerResult | None:
        """Done with the worker (its window, if any, is over): its pipe ends, so one not asked
        to time, or asked for a window that never opened, returns untimed at its next read
        (one that timed has read all the window said); waits for its end. Returns its timing
        run's result (None where it was not asked to time): its CPU seconds are those spent
        after it delivered."""
        self.control._end()
        self._thread.join()
        final = self._final
        if not self._asked or final is None:
            return None
        before = self._delivered.cpu_s if self._delivered is not None else None
        cpu = None if final.cpu_s is None or before is None else \
            round(max(0.0, final.cpu_s - before), 3)
        return dataclasses.replace(final, cpu_s=cpu)
