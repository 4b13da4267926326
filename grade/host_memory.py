"""Host memory for the grader's CPU workers: what one needs, held while it runs."""
from __future__ import annotations

from contextlib import contextmanager

from kernelmill.validate.host_admission import address_limit, host_budget

# Address space a grading worker may map beyond its admitted bytes for threads (each maps an
# 8 MiB stack and, under glibc, up to a 64 MiB malloc arena): not memory it holds, but RLIMIT_AS
# counts it, and a submission that starts threads must be judged for them, not fail to start them.
THREAD_ROOM = 4 << 30


class HostMemory:
    """The ``Grader``'s admission of CPU workers on the host's memory (``validate.host_admission``),
    as validation admits its own. Reads the grader's ``policy``, ``host_memory_bytes``,
    ``worker_device``, ``_host_needs`` and ``_lock``."""

    def _host_need(self, source: str) -> int:
        """Host bytes one grading worker of this (shrunk) problem may hold: its model twice,
        the forward's own tensors twice, and the inputs and outputs of every trial and checked
        call copied to the host, from the meta-device estimate (``memory.estimate_problem``),
        plus what a worker holds besides tensors. Unknown: half the budget."""
        from kernelmill.validate.memory import HOST_BASE_BYTES
        from kernelmill.validate.runner import estimate_on_host

        with self._lock:
            if source in self._host_needs:
                return self._host_needs[source]
        budget = host_budget(self.host_memory_bytes)
        est = estimate_on_host(source, budget, sandbox=self.policy.sandbox)
        if est.get("method") == "meta":
            p, i, o = est["params_bytes"], est["inputs_bytes"], est["outputs_bytes"]
            act = max(0, est["forward_peak_bytes"] - p - i)
            copies = max(1, self.policy.trials) + 6  # trials, refill, repeat, timed, audit...
            need = HOST_BASE_BYTES + 2 * (p + act) + copies * (i + o)
        else:
            need = budget.need_for(None)
        with self._lock:
            self._host_needs[source] = need
        return need

    @contextmanager
    def _on_host(self, source: str, workers: int = 1, together: bool = False):
        """Hold the host memory of ``workers`` grading workers of ``source`` (CPU only) and
        yield the address-space limit each gets: a wrong estimate fails that run alone. With
        ``together`` one worker does the work of ``workers`` (a batch of references)."""
        if self.worker_device != "cpu":
            yield {}
            return
        need = self._host_need(source)
        with host_budget(self.host_memory_bytes).hold(need * workers):
            yield self._worker_limits(source, workers, together)

    def _worker_limits(self, source: str, workers: int = 1, together: bool = False) -> dict:
        """The limits a grading worker of ``source`` gets (``_on_host``'s), held or not."""
        if self.worker_device != "cpu":
            return {}
        from kernelmill.validate.runner import address_base

        need = self._host_need(source)
        each = need * workers if together else need
        return {"address_space": address_limit(each, address_base()) + THREAD_ROOM}
