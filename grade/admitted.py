"""A grade's hold on its GPU's memory and the host's while it runs (``validate.admission``,
as validation admits problems), and its members graded again alone where they ran out of GPU
memory while the grade shared the GPU (``admitted_grade``)."""
from __future__ import annotations

import contextlib
import logging
import time

from kernelmill.core.errors import env_choice
from kernelmill.validate.memory import CONTEXT_BYTES

from .early_candidates import early_candidates
from .grader import Grader, ReferenceError
from .retry import device_short

log = logging.getLogger("kernelmill")


def admitted_grade(grader: Grader, item: dict, sources: list[str], slot: dict,
                   grade) -> list[dict]:
    """``grade(sources, held)``'s verdicts (``held``: the callable that takes the holds down to
    the problem's known sizes, or None) for a grade of ``sources`` against ``item``'s problem,
    run while it holds the memory ``_admitted`` gives it. A member whose run failed for want of
    device memory while the grade shared its GPU (``may_rerun``: no hack found, no answer found
    wrong) is graded again once, holding the GPU alone (as validation reruns a worker), and
    that verdict is final: a grader that packs too many grades onto a GPU does not turn its own
    shortage into an honest answer's failed run. An answer can say it ran short itself: that
    buys it the one retry an honest run short of memory gets (as a worker killed from outside
    gets one, ``retry.transient``), at the price of a GPU drained for it; the rerun counts as
    its second attempt (``retry.attempt_of``), and a member graded again is timed against
    another reference timing than the rest of its group. Where the rerun's reference fails,
    the members keep their first verdicts. Each verdict's profile says how long its grade
    waited for memory (``admission_wait_s``; ``admission_waits_s``: for the host's budget, then
    the GPU's, its last admission's) and whether it was graded alone again (``rerun_alone``)."""
    verdicts, waited, shared, whole = _grade_held(grader, item, sources, slot, grade,
                                                  alone=False)
    for verdict in verdicts:
        verdict.setdefault("profile", {}).update(admission_wait_s=round(waited, 3),
                                                 **({"rerun_alone": True} if whole else {}))
    again = [i for i, verdict in enumerate(verdicts) if may_rerun(verdict)]
    if not again or not shared:
        return verdicts
    log.info("%d of a grade's %d members ran out of memory while it shared the GPU; "
             "grading them again alone", len(again), len(sources))
    try:
        redone, waited_alone, _, _ = _grade_held(grader, item, [sources[i] for i in again],
                                                 slot, grade, alone=True)
    except ReferenceError as exc:
        for i in again:
            verdicts[i]["profile"]["rerun_alone_failed"] = str(exc)[:300]
        return verdicts
    for i, verdict in zip(again, redone):
        verdict.setdefault("profile", {}).update(
            admission_wait_s=round(waited + waited_alone, 3), rerun_alone=True)
        verdicts[i] = verdict
    return verdicts


def _grade_held(grader: Grader, item: dict, sources: list[str], slot: dict, grade,
                alone: bool, waited_before: float = 0.0,
                redo: bool = False) -> tuple[list[dict], float, bool, bool]:
    """``grade``'s verdicts under ``_admitted``'s holds, the seconds it waited for them, whether
    it may have shared its GPU, and whether the whole grade was graded again alone: a reference
    run that ran out of memory while sharing raises a ``ReferenceError`` saying so, and the
    grade is then graded again alone."""
    asked = time.monotonic()
    with _admitted(grader, item, len(sources), slot, alone=alone) as held:
        waited = waited_before + time.monotonic() - asked
        try:
            verdicts = grade(sources, held)
            if held is not None:  # which budget the grade waited for
                for verdict in verdicts:
                    verdict.setdefault("profile", {})["admission_waits_s"] = dict(held.waits)
            return verdicts, waited, bool(held is not None and held.shared), redo
        except ReferenceError as exc:
            if alone or held is None or not held.shared or not device_short(exc):
                raise
    log.info("a reference run ran out of memory while its grade shared the GPU; "
             "grading again alone")
    return _grade_held(grader, item, sources, slot, grade, alone=True, waited_before=waited,
                       redo=True)


def ran_out_of_memory(verdict: dict) -> bool:
    """Whether a verdict's run or its timing window failed for want of device memory."""
    return any(device_short(text) for text in ((verdict.get("error") or {}).get("message"),
                                               (verdict.get("timings") or {}).get("error")))


def may_rerun(verdict: dict) -> bool:
    """A verdict a rerun alone may replace: its run or window short of device memory, no hack
    found and no answer found wrong (its run failed before one was judged, or its answers
    were right and its window failed)."""
    return ran_out_of_memory(verdict) and not verdict.get("hacks") and \
        (bool(verdict.get("error")) or bool(verdict.get("correct")))


class _Held:
    """A grade's holds (``_admitted``): called, takes them down to the problem's known sizes;
    ``shared``: whether another grade may have held the same GPU while this one did (a budget
    shared with other grading processes may always have)."""

    def __init__(self, resize, grant, budget, waits: dict | None = None):
        self._resize, self.grant, self.budget = resize, grant, budget
        self.waits = waits or {}  # seconds waited for the host's budget, then the GPU's

    def __call__(self) -> None:
        self._resize()

    @property
    def shared(self) -> bool:
        return not self.grant.asked_alone and \
            (self.grant.shared or self.budget.shared is not None)


@contextlib.contextmanager
def _admitted(grader: Grader, item: dict, members: int, slot: dict, alone: bool = False):
    """Hold the slot's GPU memory and the host's for a grade of ``members`` submissions
    (``validate.admission``, as validation admits problems); ``alone``: the GPU to itself. On
    the GPU: each member's candidate worker and the worker that times the reference in the
    window at ``Grader.device_bytes`` each, plus ``WORKER_BASE_BYTES`` (with ``KERNELMILL_ADMIT``
    ``seen``: at what NVML read its workers holding, where it has, the reference's timing
    worker at no less than the reference's own peak; the other
    fresh-reference workers end before the candidates start; the first stays to time,
    ``live_reference``). On the host: what this
    process keeps of each member (``Grader.group_host_bytes``: its reference run, the
    candidate's job and outputs; the part of a run several members share, once), against the
    host's budget, which every kernelmill process of the machine
    shares. While a problem's size is unknown (its first grade) ``UNKNOWN_SHARE`` of each is
    held until its reference runs are in (with a cold reference, after its Inductor compile),
    then what they show it needs. Yields a ``_Held`` (None: nothing held)."""
    budget = None
    if slot.get("gpu") is not None and _SLOTS_PER_GPU.get(slot["gpu"], 2) >= 2:
        from kernelmill.validate.admission import budget_for

        budget = budget_for(slot)  # on CPU host memory is admitted per worker; alone, no need
    if budget is None:
        yield None
        return
    from kernelmill.validate.admission import ALLOCATOR_FACTOR
    from kernelmill.validate.host_admission import host_budget

    # candidates' workers started beside the reference run (``early_candidates``): their CUDA
    # contexts are held while the reference's workers run too (given back once they are in)
    early = members * WORKER_BASE_BYTES if early_candidates() else 0

    def device_need() -> int | None:
        seen = grader.seen_worker_bytes(item["reference"], slot.get("env")) \
            if env_choice(ADMIT_VAR, ADMIT_MODES) == "seen" else None
        if seen:
            # the worker timing the reference holds at least the reference's own peak: NVML
            # reads the workers still running after the window, which it has mostly left
            each = int(seen * SEEN_MARGIN)
            peak = grader.reference_peak_bytes(item["reference"], item.get("record"),
                                               slot.get("env"))
            timing = each if peak is None else \
                max(each, int(peak * ALLOCATOR_FACTOR + WORKER_BASE_BYTES))
            return each * members + timing + early
        each = grader.device_bytes(item["reference"], item.get("record"), slot.get("env"))
        return None if each is None else \
            int((each * ALLOCATOR_FACTOR + WORKER_BASE_BYTES) * (members + 1)) + early

    def host_need() -> int | None:  # a shared reference run's part held once per run
        return grader.group_host_bytes(item["reference"], members, slot.get("env"))

    host = host_budget(getattr(grader, "host_memory_bytes", None))
    known_device, known_host = device_need(), host_need()
    asked = time.monotonic()
    with contextlib.ExitStack() as holds:
        host_grant = holds.enter_context(host.hold(
            int(host.capacity * UNKNOWN_SHARE) if known_host is None else known_host))
        got_host = time.monotonic()
        grant = holds.enter_context(budget.hold(
            int(budget.capacity * UNKNOWN_SHARE) if known_device is None else known_device,
            alone=alone))
        waits = {"host": round(got_host - asked, 3),
                 "device": round(time.monotonic() - got_host, 3)}

        def resize() -> None:
            """(The reference runs are in.) Down to the problem's known sizes, and without the
            early workers' contexts, each its member's candidate worker from here on."""
            now_device, now_host = device_need(), host_need()
            if known_device is None and now_device is not None:
                budget.shrink(grant, now_device - early)
            elif early and known_device is not None:
                budget.shrink(grant, known_device - early)
            if known_host is None and now_host is not None:
                host.shrink(host_grant, now_host)
        yield _Held(resize, grant, budget, waits)


# What a grading worker holds on its GPU besides its problem's tensors (``Grader.
# device_bytes``): its CUDA context, cuBLAS's workspace, the timer's L2 flush buffer and the
# allocator's slack; validation's base per worker. Without it 32 grades of a 4k fp16 GEMM were
# admitted at once on an H100 (0.27 GiB a worker) and three honest members ran out of memory;
# NVML read the grading workers of the KernelBench subset at 2.1 GiB each at the median (0.7
# to 5.8). At 1 GiB their grades waited 12-25 s for memory at the median, 7 in flight.
WORKER_BASE_BYTES = CONTEXT_BYTES
# ``seen``: a problem whose workers NVML has read (``Grader.seen_worker_bytes``: in this process
# or, kept on disk per GPU model, in an earlier one) is admitted at what they were seen to hold,
# ``SEEN_MARGIN`` times over, not at its estimate: an A/B switch for the GPU runs (off: the
# estimate), until one says which packs the GPU without running short
ADMIT_VAR = "KERNELMILL_ADMIT"
ADMIT_MODES = ("sizes", "seen")  # by the reference runs' sizes (the default), or as NVML saw
SEEN_MARGIN = 1.15


# A problem's first grade holds this share of the GPU until its size is known: at half (as
# validation asks) a cold pass of 12 problems ran 2 at a time, with the GPU 16% and the host's
# CPUs 14% busy (H200, 8 slots), each holding its share through the reference's Inductor compile
UNKNOWN_SHARE = 0.25
_SLOTS_PER_GPU: dict = {}  # GPU index -> slots the local backend gives it in this process
