"""Worker side of validation: the probe's device plumbing on a shared GPU.

Timing a forward (``_time_forward``, each forward alone in an exclusive window:
``_timed_window``, and the probe's ``timing`` entry: ``_timing_section``), a stage of GPU work
under the lock held shared (``_section``), the worker's allocator cap and peak memory
(``cap_memory``, ``_peak_bytes``, ``_peak_allocated``, ``_release_cache``), and host syncs
(``_host_syncs``, ``_syncing_work``, ``_launch_work``). Used by ``probe``.

Imports only torch, the standard library, ``measure`` and ``timer``, and the worker-side
modules ``forwards`` and ``device_work``.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import forwards as F
from . import measure as M
from . import timer as T
from .device_work import device_work, syncs_in_loops
from .forwards import _clone, _device_poisoned, _mark

# ---------------------------------------------------------------- timing

# Validation's timing describes a problem (the runtime band, Inductor's speedup, the difficulty
# tier); the grader times every answer again beside the reference. A 1% half-width, a 1 s cap
# and three samples of a call too long for five in it keep each problem's exclusive window short.
VALIDATE_TIMING = {"ci_target_pct": 1.0, "cap_ms": 1000.0, "min_reps": 5, "round_reps": 5,
                   "long_call_reps": 3}


def _forward_call(model, inputs: list) -> Callable[[], Any]:
    import torch

    def fn():
        with torch.no_grad():
            return model(*inputs)

    return fn


def _time_forward(model, inputs: list, device: str, name: str = "",
                  prepared: T.Timer | None = None, timing: dict | None = None) -> dict:
    """``timer.measure`` of one forward: CUDA graph replays when capturable, else CUDA
    events with an L2 flush; adaptive reps to ``VALIDATE_TIMING``'s confidence half-width or
    its time cap (``timing``: the run's own ``ci_target_pct``/``cap_ms``, from its settings).
    ``name``: the worker's profile gets a stage per phase, ``timing <name> <phase>``.
    ``prepared``: its ``Timer``, prepared already."""
    settings = {**VALIDATE_TIMING, **{k: float(v) for k, v in (timing or {}).items()
                                      if k in ("ci_target_pct", "cap_ms") and v}}
    return T.measure(_forward_call(model, inputs), device, prepared=prepared,
                     on_phase=(lambda phase: _mark(f"timing {name} {phase}")) if name else None,
                     **settings)


def _section(lock, device: str, stage: str):
    """One stage of GPU work: marked (a crash names it), under the GPU lock held shared, and
    finished on the device before the lock is let go. A timing window that waits for the shared
    holders to drain waits for one forward, not a whole probe or stage: before each forward of
    the stage, the hold steps aside for a waiting window
    (``_Held.let_window_in``; with 16 workers on a GPU, whole-probe holds left the GPU idle most
    of the time). Time spent waiting for the lock is marked ``waiting for the GPU``."""
    import contextlib

    @contextlib.contextmanager
    def held():
        _mark("waiting for the GPU")
        with lock.shared() as hold:
            _mark(stage)

            def between() -> None:
                M.synchronize(device)
                if hold.let_window_in(lambda: _mark("waiting for the GPU")):
                    _mark(stage)

            F._between_forwards[0] = between
            try:
                yield
            finally:
                F._between_forwards[0] = None
                M.synchronize(device)

    return held()


def _timed_window(lock, device: str, forwards: dict, timing: dict | None = None) -> dict:
    """Time each forward of ``forwards`` (name -> (model, inputs)) one after the other, each
    in an exclusive window of its own: prepared first (warm-up, host time, graph capture)
    under the lock held shared, beside other work, then sized again, warmed and sampled
    alone. Preparation was 42% of the exclusive time on KernelBench levels 2-3 (H200), and
    every other worker's GPU work waits while a window holds the GPU."""
    times = {}
    for name, (model, inputs) in forwards.items():
        with _section(lock, device, f"timing {name} prepare"):
            timer = T.Timer(_forward_call(model, inputs), device,
                            graph_output_bytes=T.GRAPH_OUTPUT_BYTES)
            timer.prepare()
        _mark("timing: waiting for the GPU")
        with lock.exclusive():
            _mark("timing")
            times[name] = _time_forward(model, inputs, device, name=name, prepared=timer,
                                        timing=timing)
        del timer  # its graph's memory goes before the next forward's is captured
    return times


def _timing_section(timing: dict | None, device: str, syncing: dict) -> dict:
    """The probe's ``timing`` entry from ``_time_forward``'s result (None: not timed here);
    ``syncing``: the host syncs' count and evidence (``checks.SYNC_KEYS``)."""
    on_cuda = device.startswith("cuda")
    if timing is None:
        return {"device": "cuda" if on_cuda else "cpu", "eager_ms": None, **syncing}
    return {"device": "cuda" if on_cuda else "cpu",
            "eager_ms": timing["ms"], "host_ms": timing["host_ms"] if on_cuda else None,
            "host_driver_allocations": timing.get("host_driver_allocations"),
            "host_wall_ms": timing.get("host_wall_ms") if on_cuda else None,
            "host_thread_ms": timing.get("host_thread_ms") if on_cuda else None,
            "host_alone": bool(timing.get("host_alone")),
            "reps": timing["reps"], "method": timing["method"], "ci_pct": timing["ci_pct"],
            "launch_ratio": (timing["host_ms"] / timing["ms"])
            if on_cuda and timing["ms"] > 0 else None,
            **syncing}


def cap_memory(cap: int | None, device: str, expandable: bool = True) -> None:
    """Set up this worker's CUDA allocator: with ``expandable``, expandable segments (a segment
    grows in place, so what the allocator reserves stays near what live tensors hold: level-1
    probes reserved 1.40x their estimate at the median without them, 1.07x with them), and a
    cap of ``cap`` bytes (``admission.CAP_FACTOR`` times its grant): where its cache would grow
    past that, the allocator frees cached blocks and retries, and it raises out of memory only
    when live tensors need more (the parent then reruns it alone, uncapped). A replay timed by
    CUDA graphs keeps the default segments: with expandable ones, 14 of 146 such replays of
    KernelBench (convolutions) reserved 3-9x their live tensors and ran out of their caps."""
    if not M.is_cuda(device):
        return
    import torch

    if expandable:
        try:
            torch.cuda.memory._set_allocator_settings("expandable_segments:True")
        except (AttributeError, RuntimeError):  # a torch without them: the default segments
            pass
    if not cap:
        return
    index = torch.device(device).index
    index = torch.cuda.current_device() if index is None else index
    total = torch.cuda.get_device_properties(index).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, cap / total), index)


def _peak_allocated(device: str) -> int | None:
    """The most bytes of live tensors this worker held on its GPU (None on CPU)."""
    if not M.is_cuda(device):
        return None
    import torch

    return int(torch.cuda.max_memory_allocated())


def _peak_bytes(device: str) -> int | None:
    """The most device memory this worker's allocator held (CUDA); on CPU, the most resident
    memory this worker held (``VmHWM``, pages shared with its zygote included)."""
    if not device.startswith("cuda"):
        try:
            with open("/proc/self/status") as handle:
                for line in handle:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1]) * 1024
        except (OSError, ValueError, IndexError):
            pass
        return None
    import torch

    return int(torch.cuda.max_memory_reserved())


# Forwards the host syncs are counted over: the fewest any of them made counts (a sync that
# one call alone makes, a library's first-call search or an allocator growing its pool, is not
# the forward's own; a read of a result, ``.item()`` or ``nonzero``, comes back every call)
SYNC_CALLS = 2


def _count_host_syncs(model, inputs: list, device: str, copies: bool = True) -> int | None:
    """How many times every forward makes the host wait for the GPU (``.item()``, ``nonzero``,
    boolean masks ...): the fewest over ``SYNC_CALLS`` calls. Then host time is not launch
    overhead. None on CPU."""
    if not device.startswith("cuda"):
        return None
    import warnings

    import torch

    counts = []
    for _ in range(SYNC_CALLS):
        args = _clone(inputs) if copies else inputs
        torch.cuda.synchronize()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                with torch.no_grad():
                    model(*args)
            finally:
                torch.cuda.set_sync_debug_mode("default")
        torch.cuda.synchronize()
        counts.append(sum("synchroniz" in str(w.message) for w in caught))
        del args
        if not counts[-1]:
            break
    return min(counts)


def _host_syncs(model, inputs: list, device: str, source: str, copies: bool = True) -> dict:
    """The ``checks.SYNC_KEYS`` of one forward: how often it makes the host wait and the
    source's host reads in forward's loops (``device_work`` comes later: ``_syncing_work``)."""
    return {"host_syncs": _count_host_syncs(model, inputs, device, copies),
            "syncs_in_loops": syncs_in_loops(source), "device_work": None}


def _syncing_work(lock, device: str, model, inputs: list, syncing: dict,
                  copies: bool = True) -> dict:
    """``syncing`` with ``device_work`` for a forward that syncs with the host: its kernels and
    their busy time, which the launch check compares with its eager time. Read after the
    timing: a profiler session can leave later launches slower."""
    if not syncing["host_syncs"]:
        return syncing
    syncing["device_work"] = _device_work_alone(lock, device, model, inputs, copies)
    return syncing


# A host issue time over this share of the GPU time (``launch_ratio``) is checked against the
# device's own record (``_launch_work``): the launch check's default bar (a lower bar set in
# the config fails such forwards on their host time)
LAUNCH_SUSPECT = 0.8


def _launch_work(lock, device: str, model, inputs: list, timing: dict,
                 copies: bool = True) -> dict | None:
    """``device_work`` for a forward that does not sync but whose host issue time reads
    launch-bound (``LAUNCH_SUSPECT``), else None. A forward of more launches than the driver
    queues ahead of the GPU, on a host faster than its GPU, waits for room in the queue inside
    its launches, so its host time tracks its GPU time, and any other process slowing the GPU
    lengthens it; the kernels' count, their busy time and the plain calls' return and wall
    times with the GPU alone say whether the queue filled and the GPU waited
    (``checks.judge_launch``)."""
    ratio = timing.get("launch_ratio")
    if not device.startswith("cuda") or ratio is None or ratio <= LAUNCH_SUSPECT:
        return None
    return _device_work_alone(lock, device, model, inputs, copies)


def _device_work_alone(lock, device: str, model, inputs: list, copies: bool) -> dict:
    """``device_work`` read with the GPU alone, as the eager time is timed: beside other
    processes' kernels a forward's own read longer (a bidirectional GRU's 12,300 kernels read
    57.5 ms busy of a 73 ms call in one audit, 35.5 of 89 in the next), and the host's wait
    looked like work. An error becomes ``{"error": ...}`` (the check stands down)."""
    _mark("device work: waiting for the GPU")
    with lock.exclusive():
        _mark("device work")
        try:
            return device_work(model, lambda: _clone(inputs) if copies else inputs, device)
        except Exception as exc:  # noqa: BLE001 — no profiler reading: the check stands down
            if _device_poisoned(exc):
                raise
            return {"error": f"{type(exc).__name__}: {exc}".splitlines()[0][:200]}


def _release_cache(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()
