"""The worker's side of the parent-driven timing window (``validate.window``): a
``validate.timer.Timer`` prepared for a forward and served through the window's commands."""
from __future__ import annotations

import torch
from kernelmill.grade.witness import Witness
from kernelmill.validate import timer as T
from kernelmill.validate.harness_worker import (
    receive,
    report,
)
from kernelmill.validate.window_worker import serve_window

from .guards.originals import _perf_counter

# ---------------------------------------------------------------- timing

def device_info(device: str) -> dict:
    info = {"device": device, "torch": str(torch.__version__)}
    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        info["name"] = props.name
        clock_khz = getattr(props, "memory_clock_rate", None)
        bus_bits = getattr(props, "memory_bus_width", None)
        if clock_khz and bus_bits:
            info["bandwidth_gbs"] = 2 * clock_khz * 1e3 * bus_bits / 8 / 1e9
    return info


# bound at the import, before any candidate code runs (numbers for the profile alone)
_MAX_ALLOCATED, _MAX_RESERVED = torch.cuda.max_memory_allocated, torch.cuda.max_memory_reserved
# the allocator's counters as the C extension gives them (no Python function of the library
# between: a stage mark calls no code a submission may have replaced); None on a CPU build
_MEMORY_STATS = getattr(torch._C, "_cuda_memoryStats", None)


def device_memory(device: str, stages: StageMemory | None = None) -> dict | None:
    """The most this worker's allocator has held on the device so far, in MiB: its tensors at
    once (``allocated``) and its cache with them (``reserved``: what NVML reads of the worker
    less its context and libraries). The profile's, for the admission's estimate (no check
    reads it: the candidate shares the process); with ``stages``, their marks to here
    (``stages``: name, MiB held as it began, the most so far, MiB reserved). None off a GPU."""
    if not device.startswith("cuda"):
        return None
    try:
        peaks = {"allocated": round(_MAX_ALLOCATED(device) / 2**20),
                 "reserved": round(_MAX_RESERVED(device) / 2**20)}
    except Exception:  # noqa: BLE001 — no reading
        return None
    if stages is not None:
        stages.mark("gpu done")
        stages.index = None  # the host work after is not the device's
        if stages.marks:
            peaks["stages"] = stages.marks
    return peaks


class StageMemory:
    """What the worker's allocator held as each stage began (``mark``), for the profile: the
    stages' names in order, each with the MiB of tensors held then, the most held so far (a
    stage raised the peak where the next mark's most is higher) and the MiB the allocator
    reserved then (what NVML reads of the worker, less its context and libraries). Nothing
    off a GPU or before the device's allocator has started (``start``)."""

    def __init__(self, device: str):
        self.index: int | None = None
        self.device = device
        self.marks: list[list] = []

    def start(self) -> None:
        """From here on each mark reads the allocator (after the worker's CUDA init)."""
        if self.device.startswith("cuda") and _MEMORY_STATS is not None:
            try:
                self.index = torch.device(self.device).index or 0
            except Exception:  # noqa: BLE001 — no reading
                self.index = None

    def mark(self, name: str) -> None:
        if self.index is None:
            return
        try:
            stats = _MEMORY_STATS(self.index)
            held, cached = stats["allocated_bytes"]["all"], stats["reserved_bytes"]["all"]
            self.marks.append([name, round(held["current"] / 2**20), round(held["peak"] / 2**20),
                               round(cached["current"] / 2**20)])
        except Exception:  # noqa: BLE001 — no reading
            self.index = None


def _timer_options(payload: dict) -> dict:
    """``timer.Timer`` options from the policy's timing settings (the rest are the window's)."""
    settings = payload.get("timing_settings") or {}
    options = {k: settings[k] for k in ("warmup", "graph", "sample_ms", "cover") if k in settings}
    if settings.get("spare_graph") is not False:  # ``Timer(spare=True)``: on unless false
        options["spare"] = True
    if settings.get("replay_sync") is False:  # ``Timer(replay_sync=False)``: only a false
        options["replay_sync"] = False
    if settings.get("gate") is not False:  # on unless the policy sets it ``false``
        options["gate"] = True
    return options


def timing_placing(payload: dict) -> str:
    """How the timed calls read the copies of their inputs (``timer.PLACINGS``): the policy's
    timing setting ``placing``, else ``timer.PLACING``."""
    placing = (payload.get("timing_settings") or {}).get("placing")
    return placing if placing in T.PLACINGS else T.PLACING


def single_warm(payload: dict) -> bool:
    """Whether a second one-call check is made, on a hidden trial of its own after the first,
    its new inputs read into the L2 cache before its call (``timer.warm_cache``) as a scored
    call finds its own: the policy's timing setting ``single_warm``, on unless it is false."""
    return (payload.get("timing_settings") or {}).get("single_warm") is not False


def _serve_timing(fn, device: str, payload: dict, witness: Witness | None = None,
                  unseen=None, send=None, after_work=None, after_sample=None, prepared=None,
                  place=None):
    """Prepare a timer for ``fn``, tell the parent it is ready, answer its window's commands.
    ``prepared(timer)`` runs once the timer is, before the worker says it is ready; ``place``
    is the timer's (``timer.PlacementTurns.capture``).
    With a captured CUDA graph the witness pauses for the window: replays run no candidate
    Python, and recording every replayed kernel cost seconds of reading afterwards."""
    began = _perf_counter()
    options = _timer_options(payload)
    if unseen is None:  # the gate times only the unseen check's replays: none made here
        options.pop("gate", None)
    timer = T.Timer(fn, device, place=place, **options)
    ready = timer.prepare()
    if prepared is not None:
        prepared(timer)
    # its warm-up, estimate and capture, beside other grades' work: for the profile alone
    ready = {**ready, "prepare_ms": round((_perf_counter() - began) * 1e3, 1)}
    if timer.graph is None:  # one call per sample: ``after_sample`` may look between calls
        timer.after_sample = after_sample
    else:
        # A graph's rounds and loops are replays: no candidate Python runs between them, so
        # nothing can set a mark there and clear it before the check after timing, which
        # sees any change the replays' kernels leave (and the hot replay's calls, any work a
        # kernel skips). Comparing every input on the host after each round cost 0.6-0.9 CPU s
        # per submission on an H100 host, inside the exclusive window (py-spy).
        after_work = None
    paused = witness is not None and timer.graph is not None
    if paused:
        witness.pause()
    send = send or report
    send({"ready": ready})
    try:
        # (with a graph, ``unseen`` replays a one-call graph: no candidate Python runs either)
        return timer, serve_window(timer, receive, send, unseen, after_work)
    finally:
        if paused:
            witness.resume()
