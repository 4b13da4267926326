"""The verdicts on a forward's time (parent side): whether the GPU waits on the host's launches
and syncs (``judge_launch``) and how TorchInductor's compiled forward compares
(``judge_inductor``). Pure functions of the timing worker's numbers.
"""
from __future__ import annotations

import math

from kernelmill.validate.check_terms import check
from kernelmill.validate.check_terms import fmt as _fmt

__all__ = [  # what validate.checks re-exports
    "LAUNCH_QUEUE", "QUEUED_IDLE", "QUEUED_TAIL", "SYNC_KEYS", "host_wait_ratio",
    "judge_inductor", "judge_launch",
]

# What the probe measures of a forward's host syncs, carried beside the eager timing wherever
# it is taken: the count, the source's host reads in forward's loops, and ``device_work``.
SYNC_KEYS = ("host_syncs", "syncs_in_loops", "device_work")


def host_wait_ratio(eager_ms: float, busy_ms: float) -> float:
    """The time a forward's GPU waits on the host (for launches and for syncs alike) per ms it
    is busy: its eager time less its kernels' busy time, over that busy time. A forward that
    waits for the GPU at every step runs host and GPU one after the other, so its eager time is
    about its host time plus its GPU time, and this is its host time over its GPU time: the
    ratio a forward that never waits is judged by (host issue time over graph-timed GPU time),
    against the same threshold."""
    if busy_ms <= 0:
        return math.inf
    return max(0.0, eager_ms - busy_ms) / busy_ms


def judge_launch(timing: dict, max_ratio: float) -> dict:
    """Host time to issue forward over its GPU time: near 1 means the GPU waits on launches.
    A forward that syncs with the host (``host_syncs``) cannot be timed as a CUDA graph and its
    host time includes the waits: it is judged by ``host_wait_ratio`` of its eager time and its
    kernels' busy time (``device_work``), so a launch-bound loop with a sync per step fails
    like one without. A host time that reads launch-bound because its launches waited for
    room in the driver's queue passes (``_queued_launches``)."""
    ratio, ms = timing.get("launch_ratio"), timing["eager_ms"]
    if timing.get("host_syncs"):
        return _judge_syncing_launch(timing, max_ratio)
    ok = ratio is not None and ratio <= max_ratio
    head = f"host issue time {_fmt(timing.get('host_ms'))} ms vs GPU {ms:.4g} ms"
    queued = None if ok else _queued_launches(timing)
    if queued is not None:
        return check(True, ratio, head + queued)
    drove = timing.get("host_driver_allocations")
    held = f"; every host sample held {drove} or more of the memory allocator's calls into " \
        "the driver" if drove and not ok else ""
    return check(ok, ratio, head + ("" if ok else " (launch-overhead bound)") + held)


# Launches the driver queues ahead of the GPU before a launch waits for room (an H200 host
# issuing cuDNN's 3,676-kernel tiled FFT transposed convolution blocked after about 1,100).
LAUNCH_QUEUE = 1024
# The GPU waiting on the host for at most this share of its busy time in an eager call is no
# wait (the first launch, the sync after the last); readings further apart disagree
QUEUED_IDLE = 0.1
# A host that filled the queue returns from ``forward`` with at least this share of a queue's
# kernels still ahead of the GPU
QUEUED_TAIL = 0.5


def _queued_launches(timing: dict) -> str | None:
    """Why a host time that reads launch-bound is not, or None. A forward of ``LAUNCH_QUEUE``
    launches or more whose host is faster than its GPU fills the driver's queue and then waits
    inside its launches for room, so its host time tracks its GPU time (and grows with any
    other process's GPU work). The device's own record (``device_work``, read with the GPU
    alone) must show both: the host returned from ``forward`` with ``QUEUED_TAIL`` of a queue
    of kernels still ahead of the GPU (at their mean duration), and the eager call's wall time
    within ``QUEUED_IDLE`` of its kernels' busy time (the union of their intervals), so the GPU
    never waited on the host. A host about as fast as its GPU, or slower, never fills the
    queue: its host time is issue time and the verdict stands."""
    work = timing.get("device_work") or {}
    kernels, busy = work.get("kernels") or 0, work.get("busy_ms")
    wall, issue = work.get("eager_wall_ms"), work.get("eager_issue_ms")
    if timing.get("host_syncs") or kernels < LAUNCH_QUEUE or not busy or wall is None or \
            issue is None:
        return None
    ahead = QUEUED_TAIL * LAUNCH_QUEUE * busy / kernels
    if wall - issue < ahead or abs(wall - busy) > QUEUED_IDLE * busy:
        return None
    return (f", but its {kernels} launches, more than the driver queues ({LAUNCH_QUEUE}), "
            f"waited for room in the queue: with the GPU alone the host returned "
            f"{_fmt(wall - issue)} ms of work ahead of the GPU, which was busy {_fmt(busy)} ms "
            f"of the eager call's {_fmt(wall)} ms, never waiting on the host")


def _judge_syncing_launch(timing: dict, max_ratio: float) -> dict:
    ms, syncs, work = timing["eager_ms"], timing["host_syncs"], timing.get("device_work")
    head = f"forward waits for the GPU {syncs} time(s)"
    if not work or work.get("busy_ms") is None:
        why = (work or {}).get("error", "not measured")
        return check(None, None, f"{head} (.item(), .cpu(), nonzero, boolean masks) and its "
                     f"kernels' time is unknown ({why}): host time is not launch overhead")
    busy = work["busy_ms"]
    # Readings of the call's time, each too long for its own reason: the timed eager time
    # (another process, whose library may pick a slower algorithm under its memory cap), the
    # profiled call beside the busy time (the profiler's own cost) and the plain calls with
    # the GPU alone (``eager_wall_ms``). The host waits at most the least one's excess.
    walls = [w for w in (work.get("wall_ms"), work.get("eager_wall_ms")) if w is not None]
    wall = min(walls) if walls else None
    profiled = wall is not None and wall < ms
    ratio = host_wait_ratio(wall if profiled else ms, busy)
    ok = ratio <= max_ratio
    loops = timing.get("syncs_in_loops") or []
    label = "profiled call" if wall == work.get("wall_ms") else "call with the GPU alone"
    read = (f"its {label} {_fmt(wall)} ms (eager {ms:.4g} ms)" if profiled
            else f"eager {ms:.4g} ms")
    return check(ok, ratio, f"{head} and launches {work['kernels']} kernel(s); GPU busy "
                 f"{_fmt(busy)} ms of {read}: {_fmt(ratio)} ms waiting on the host "
                 "per GPU ms" + ("" if ok else " (launch- and sync-bound)")
                 + (f"; host reads in forward's loops: {', '.join(loops[:3])}"
                    + (f" (+{len(loops) - 3})" if len(loops) > 3 else "") if loops else ""))


def judge_inductor(result: dict | None, eager_ms: float | None, tol: float) -> dict:
    """Inductor: compiles, matches eager within the calibrated tolerance; speedup recorded."""
    if result is None:
        return check(None, None, "skipped")
    if result.get("skipped"):
        return check(None, None, result["skipped"])
    if result.get("error"):
        return check(False, None, f"torch.compile failed: {result['error']}")
    err = result["error_vs_eager"]
    speed = (eager_ms / result["ms"]) if eager_ms and result.get("ms") else None
    if err > tol:
        return check(False, speed, f"compiled output differs from eager by {_fmt(err)} > {tol:g}")
    return check(True, speed, f"matches (error {_fmt(err)}); {_fmt(result.get('ms'))} ms, "
                 f"speedup {_fmt(speed)}")
