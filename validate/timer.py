"""The worker-side timer, split out of ``validate.measure`` and shared by the validator (``probe``)
and the grader (``grade.worker``): ``Timer`` times a callable, ``measure`` measures it in-process.

Timing (``Timer``):

- CUDA, capturable: the forward is captured ``calls_per_sample`` times into one CUDA graph
  (enough calls for about ``sample_ms`` of device time, a power of two: ``graph_calls``) and the
  graph is replayed between two CUDA events, right behind untimed work that hides its launch
  (``cover``: by default a round's replays are queued back to back behind one untimed replay,
  else an untimed replay or a short spin kernel before each); one sample is the
  replay's time divided by the calls it holds (as ``triton.testing.do_bench_cudagraph``: no
  launch overhead, no host in the loop). The timer holds every captured call's output
  (``Timer.outputs``; the last is ``Timer.output``), so each call writes its own memory on every
  replay: the caller can refill the inputs, ``replay()``, have the parent compare the last
  output and check that every call's agrees with it (``calls_disagree``). A call that did part
  of the work into memory an earlier call also wrote (a kept tensor, slices spread over calls)
  is then either seen (``outputs_overlap``: the graph holds one call per sample) or wrong.
- CUDA, not capturable (host syncs, side streams never joined, allocation outside the pool):
  one call per sample between CUDA events after an L2 flush, ending in a device-wide synchronize
  so work on side streams counts.
- CPU: one call per sample by ``time.perf_counter`` (CI runs the same code paths).

Samples come in rounds; ``median_ci_pct`` gives the 95% confidence half-width of the median
(distribution-free, from order statistics) in percent. ``measure`` runs rounds in-process until
that half-width is under ``ci_target_pct`` or a time cap is reached; ``window_worker.serve_window`` lets a
parent drive the rounds instead (reference and candidate in separate processes, alternating in
one exclusive window, ``validate.window``).

Every function this module relies on is imported here by name from ``validate.measure``, bound
when ``measure`` is imported, before any candidate code runs, so patching ``time``, ``statistics``
or ``torch.cuda`` afterwards cannot change a measurement (the grader's worker also reports such
patches); a candidate's run in the grader's worker calls a private copy of this module. (Some
bound functions are torch's Python wrappers that look a name up when called: ``Event.record``
without a stream asks ``torch.cuda.current_stream``; those names are guarded, checked when the
run ends.)

Imports only torch, the standard library and ``validate.measure``.
"""
from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

from .measure import L2Flush, _cuda_synchronize, _Event, _event_elapsed, _event_record
from .measure import _event_wait, _cuda_sleep, _graph_replay, _median, _nullcontext
from .measure import _perf_counter, _profiler_enabled, _thread_time
from .measure import is_cuda, median_ci_pct, output_bytes, summarize, synchronize
from .measure import _cuda_get_device, _cuda_memory_stats, _process_time, _type
from .schedstat import runqueue_wait_ns
from .stream_gate import StreamGate, current_stream as _stream_handle, shared as _shared_gate
from .placement import PLACED_MAX_BYTES, PLACEMENTS, PLACING, PLACINGS  # noqa: F401 (re-exported)
from .placement import PlacementTurns, placed_copies, placement_count  # noqa: F401
from .placement import warm_cache, warm_plan  # noqa: F401
from .timing_graph import HELD_OUTPUT_BYTES, LAUNCH_MARGIN_MS, PROBE_CALLS  # noqa: F401
from .timing_graph import TimingGraphs, graph_calls  # noqa: F401 (re-exported)

# ---------------------------------------------------------------- the timer

# A call at least this long is timed with the least preparation: one warm-up, its host time
# and its estimate from one call each. Such a call is one call per sample whatever else is
# measured, and the nine calls of the full preparation (then 135 more to size a timing graph)
# made a 186 ms convolution's exclusive window 15 s on an H200, the whole GPU held meanwhile.
LONG_CALL_MS = 50.0
# Validation captures no graph for a forward whose output is larger than this: such a call
# moves at least a gigabyte (0.2 ms and more at an H200's bandwidth; the level-1 giants take
# milliseconds), so a launch's few microseconds are a small part of it, while a graph's private
# pool keeps the whole forward's memory reserved beside the allocator's own cache (replays of
# 6 GiB level-1 problems reserved 3.4x their live tensors, which admission does not count).
GRAPH_OUTPUT_BYTES = 1 << 30
# What a graph sample queues before its timed replay, so that the host's launch of that replay
# is not timed: "replay", an untimed replay of the same graph (each sample then costs two
# replays of device time), or "sleep", a spin kernel of ``COVER_SLEEP_CYCLES`` (about 0.1 ms at
# an H200's clock; a launch takes tens of µs, more for a large graph from a busy host). With
# "sleep" the rounds of single grades of KernelBench-sized answers (2.6-26 ms per call) took a
# quarter less time, but kernels of a few µs read differently in groups (a 1 µs scale-add
# 1.56-1.87x across 8 copies against 2.03-2.05x; H200). "queued": a round's samples are
# replays queued back to back behind one untimed replay, an event between each two (each timed
# replay follows a replay of the same graph, as with "replay", and the host queues the next
# launch while the GPU runs the last), so a round of ``n`` samples costs ``n + 1`` replays, not
# ``2n``; its warm-up and settling samples are "replay"'s. Against "replay", on 9 KernelBench
# and Triton answers (1 µs to 26 ms per call, H200), every median speedup agreed within 0.5%.
# "auto", the default: "queued" for samples of ``QUEUE_SAMPLE_MS`` or more (a KernelBench
# forward of 2-26 ms, where the untimed replay doubled a turn), else "replay": a GEMM at the
# GPU's power cap with 1.7 ms samples (fp16 4096²) read its copies 1.3-2.3% apart in 3 of 6
# runs with queued samples, but also 1.8% with "replay" once its turns were lengthened too
# (window.WindowSettings.min_rounds), and queued short samples were not measured apart.
COVERS = ("replay", "sleep", "queued", "auto")
COVER = "auto"
QUEUE_SAMPLE_MS = 2.0
COVER_SLEEP_CYCLES = 200_000
# A turn's settling (``Timer.settle``): the share of it a graph timer queues at once and sleeps
# through, on an event made to block (the waits on its timing events spin, whatever the CUDA
# context's flag: a spinning turn burned a core for its whole length, two thirds of it
# settling); the rest is samples as ``warm`` takes them. At most this many replays queued.
SETTLE_QUEUED_SHARE = 0.8
SETTLE_MAX_REPLAYS = 4096
# A graph launch's fixed cost, which the per-call estimate leaves out (about 20 µs on an H100):
# counted per queued replay, so a graph of one short call does not queue twice its settling.
SETTLE_LAUNCH_MS = 0.02


_gc_disable, _gc_enable, _gc_isenabled = gc.disable, gc.enable, gc.isenabled
# rounds of more host samples where every sample's allocator called the driver
HOST_RETRIES = 3
# host time over this share of a call's estimate (a launch-bound reading; the validator's bar is
# 0.8 of its GPU time) is read again with the GPU alone (``Timer.host_again``)
HOST_AGAIN_SHARE = 0.5


def _driver_allocations(cuda: bool) -> int | None:
    """How many times this process's CUDA caching allocator has called the driver to map or
    free device memory on the current device (None off CUDA, or where torch does not count
    them)."""
    if not cuda or _cuda_memory_stats is None or _cuda_get_device is None:
        return None
    try:
        stats = _cuda_memory_stats(_cuda_get_device())
        return int(stats["num_device_alloc"]) + int(stats["num_device_free"])
    except (KeyError, TypeError, ValueError, RuntimeError):
        return None


class Timer(TimingGraphs):
    """Times ``fn`` (no arguments) on ``device``; see the module docstring for the methods.

    ``prepare()`` warms up, estimates one call, measures the host time to issue a call and, on
    CUDA with ``graph``, captures the graph; then ``round(n)`` returns ``n`` per-call samples
    in ms, ``loop(n)`` runs ``n`` samples' worth of work back to back (for a parent's clock) and
    ``replay()`` reruns the captured graph once (its output is ``output``). ``graph_output_bytes``:
    no graph for a call whose output is larger (CUDA events instead)."""

    def __init__(self, fn: Callable[[], Any], device: str, *, graph: bool = True,
                 sample_ms: float = 1.0, max_calls_per_sample: int = 1024, warmup: int = 3,
                 flush: bool = True, graph_output_bytes: int | None = None,
                 cover: str | None = None,
                 place: Callable[[int | None, int], Any] | None = None,
                 spare: bool = False, replay_sync: bool = True, gate: bool = False):
        self.fn, self.device = fn, device
        # ``once`` of a graph replay: a device-wide synchronize between the replay and its end
        # event (the host's return from it inside the timed span), or only the end event on
        # the replay's stream (``False``: the span is the replay's launch and its work)
        self.replay_sync = replay_sync is not False
        # ``once`` of a graph replay behind a gate (``stream_gate.StreamGate``, this process's
        # one): the replay and its events are queued before the device starts on them, so the
        # span is the device's alone, as a scored sample's is behind its cover (no synchronize
        # in it: ``gate`` wins over ``replay_sync``); only ``True`` asks for it, and a driver
        # without stream memory operations leaves it off (``describe``'s ``gate``)
        self.gate_wanted = gate is True
        self._gate: StreamGate | None = None
        # ``spare``: ``prepare`` also captures a graph of twice the calls, which ``resize`` to
        # that count takes up at once instead of capturing in the window (``_spare``); only
        # ``True`` asks for it
        self.spare_wanted = spare is True
        self._spare = None  # (graph, outputs) of ``2 * calls_per_sample`` calls, unreplayed
        self.spare_state: str | None = None  # what became of it (``describe``)
        # told which call of how many each captured call is, and when a capture ends (the
        # caller's ``PlacementTurns.capture``: which copy of the inputs the call reads)
        self.place = place
        self.cover = cover if cover in COVERS else COVER
        self.graph_wanted, self.flush_wanted = graph, flush
        self.graph_output_bytes = graph_output_bytes
        self.sample_ms, self.max_calls, self.warmup = sample_ms, max_calls_per_sample, warmup
        self.method: str | None = None
        self.graph = None
        self.calls_per_sample = 1
        self.output = None
        self.outputs: list = []  # every captured call's output, held (the last is ``output``)
        self.outputs_overlap = False  # two calls' outputs shared memory: one call per sample
        self.capture_error: str | None = None
        self.estimate_ms: float | None = None
        self.warm_readings: list[float] = []  # the last ``warm``'s samples, ms per call
        self.host_ms: float | None = None
        self.host_driver_allocations: int | None = None
        self.host_wall_ms: float | None = None
        self.host_thread_ms: float | None = None
        self.host_alone = False  # host samples taken again with the GPU alone (``host_again``)
        self._long = False  # one call takes ``LONG_CALL_MS`` or more (``prepare``)
        self._flush: L2Flush | None = None
        self._events = None
        self._queue: list | None = None  # a queued round's events (``_queued_round``)
        self._asleep = None  # the blocking event a queued settling is waited for on
        self._single = None  # a one-call graph captured like the timed one: (graph, output)
        self._stream = None  # the capture stream (``resize`` captures on it again)
        # On CPU also the calling thread's CPU time of each sample and of the last ``once``:
        # other processes on the host stretch a call's wall time, never the CPU it spent
        self.cpu_samples: list[float] = []
        self.last_cpu_ms: float | None = None
        # and how long the last ``once`` waited for a core other processes held (None: unread)
        self.last_wait_ms: float | None = None
        # run after each sample of a ``round``, outside the sample's time (the grader's worker
        # checks the inputs there after a secret share of the samples)
        self.after_sample: Callable[[], Any] | None = None
        # the median per-call time of the window's rounds so far (``window_worker``): what the
        # unseen check's calls on the timed inputs are read against
        self.scored_ms: float | None = None

    # -------------------------------------------------------- preparation

    def prepare(self) -> dict:
        """Warm up, take the host time to issue a call and estimate one call; on CUDA with
        ``graph``, capture the timing graph. The first call is a warm-up (lazy
        initialization, compiles); when the second takes ``LONG_CALL_MS`` or more, it is the
        only other warm-up and host measurement, and the estimate is one sample."""
        cuda = is_cuda(self.device)
        self.output = self.fn()
        synchronize(self.device)
        begin = _perf_counter()
        samples = [self._host_sample(cuda)]
        long = (_perf_counter() - begin) * 1e3 >= LONG_CALL_MS
        if not long:
            for _ in range(max(0, self.warmup - 2)):
                self.output = self.fn()
            synchronize(self.device)
            samples = [self._host_sample(cuda) for _ in range(3)]
        self._long = long
        self._host_times(cuda, samples)
        estimate_reps = 1 if long else 3
        if not cuda:
            self.method = "perf_counter"
            self.estimate_ms = max(_median(self.round(estimate_reps)), 1e-6)
            self.cpu_samples.clear()
            return self.describe()
        self._events = (_Event(enable_timing=True), _Event(enable_timing=True))
        if self.flush_wanted:
            self._flush = L2Flush(self.device)
        self.method = "cuda_events"
        self.estimate_ms = max(_median(self.round(estimate_reps)), 1e-4)
        if self.graph_wanted and (self.graph_output_bytes is None or
                                  output_bytes(self.output) <= self.graph_output_bytes):
            self._capture()
        if self.gate_wanted and self.graph is not None:
            self._gate = _shared_gate()
        return self.describe()

    def _host_times(self, cuda: bool, samples: list) -> None:
        """``host_ms`` (and ``host_wall_ms``, ``host_driver_allocations``) from host samples
        (``_host_sample``), less than any taken before. A sample in which the caching allocator
        called the driver (device memory freed or mapped: a device sync the driver spins in,
        beside other processes' work) times the allocator, not the issue: where every one did,
        a few rounds more."""
        for _ in range(HOST_RETRIES if cuda else 0):
            if any(not drove for *_times, drove in samples):
                break
            samples.extend(self._host_sample(cuda) for _ in range(1 if self._long else 3))
        clean = [s for s in samples if not s[3]] or samples
        # the least: other work on the host (a validator prepares beside its other workers)
        # only lengthens the time to issue a call. On CUDA the process's CPU time (issue work
        # on any of its threads): time off the cores is not issue time (in a busy validation,
        # healthy one-kernel forwards read 68-77 ms of wall time to issue)
        wall = min(wall for wall, *_ in clean)
        host = min(cpu for _wall, cpu, *_ in clean) if cuda else wall
        # the issuing thread's own CPU time beside the process's, for the record: where they
        # part, other threads of the process ran during the call
        thread = min(own for _wall, _cpu, own, _drove in clean)
        self.host_wall_ms = wall if self.host_wall_ms is None else min(self.host_wall_ms, wall)
        self.host_thread_ms = thread if self.host_thread_ms is None else \
            min(self.host_thread_ms, thread)
        self.host_ms = host if self.host_ms is None else min(self.host_ms, host)
        # the fewest driver calls of the allocator in a sample (above 0: every sample's host
        # time holds some; the record says so, the launch check judges it as it is)
        counts = [drove for *_times, drove in samples if drove is not None]
        if counts:
            fewest = min(counts)
            self.host_driver_allocations = fewest if self.host_driver_allocations is None \
                else min(self.host_driver_allocations, fewest)

    def host_reads_launch_bound(self) -> bool:
        """The host time read so far is over ``HOST_AGAIN_SHARE`` of the call's estimate."""
        return self.host_ms is not None and bool(self.estimate_ms) and \
            self.host_ms > HOST_AGAIN_SHARE * self.estimate_ms

    def host_again(self) -> bool:
        """Host samples taken again where the host time read so far is over
        ``HOST_AGAIN_SHARE`` of the call's estimate (a launch-bound reading): called with the
        GPU alone (a window), where no other process's work can lengthen a call's issue, as it
        could beside them in ``prepare``. The output kept for the timing (a graph's) stays.
        True if it took them."""
        cuda = is_cuda(self.device)
        if not cuda or not self.host_reads_launch_bound():
            return False
        kept = self.output
        try:
            self._host_times(cuda, [self._host_sample(cuda)
                                    for _ in range(1 if self._long else 3)])
        finally:
            self.output = kept
        self.host_alone = True
        return True

    def _host_sample(self, cuda: bool) -> tuple[float, float, float, int | None]:
        """One call's host time to issue it: (wall ms, the process's CPU ms, the issuing
        thread's CPU ms, how many times the allocator called the driver meanwhile), the call
        before's output let go first (its
        memory may serve this one) and the interpreter's garbage collector held off (a
        collection of the worker's heap, an Inductor compile's objects in it, is not the
        forward's issue time); finished on the device after."""
        self.output = None
        drivers = _driver_allocations(cuda)
        collecting = _gc_isenabled()
        _gc_disable()
        try:
            begin, cpu, own = _perf_counter(), _process_time(), _thread_time()
            self.output = self.fn()
            wall, spent = (_perf_counter() - begin) * 1e3, (_process_time() - cpu) * 1e3
            own = (_thread_time() - own) * 1e3
        finally:
            if collecting:
                _gc_enable()
        after = _driver_allocations(cuda)
        synchronize(self.device)
        return wall, spent, own, (None if after is None or drivers is None else
                                  after - drivers)

    def describe(self) -> dict:
        # A profiler left running (CUPTI on CUDA) slows every launch: say so with the times.
        described = {"method": self.method, "calls_per_sample": self.calls_per_sample,
                     "estimate_ms": self.estimate_ms, "host_ms": self.host_ms,
                     "host_driver_allocations": self.host_driver_allocations,
                     "host_wall_ms": self.host_wall_ms, "host_thread_ms": self.host_thread_ms,
                     "host_alone": self.host_alone,
                     "capture_error": self.capture_error, "profiler": bool(_profiler_enabled())}
        if self.method == "cuda_graph":  # the cover its rounds take (``COVERS``)
            described["cover"] = "queued" if self.queues() else \
                ("replay" if self.cover == "auto" else self.cover)
        if self.outputs_overlap:
            described["outputs_overlap"] = True
        if self.spare_state is not None:
            described["spare_graph"] = self.spare_state
        if self.gate_wanted:  # asked for: made or not
            described["gate"] = self._gate is not None
        if self.cpu_samples:
            described["cpu_ms"] = _median(self.cpu_samples)
        return described

    @property
    def gated(self) -> bool:
        """Whether ``once`` gates its graph replays (``gate``: asked for, and made)."""
        return self._gate is not None

    # -------------------------------------------------------- sampling

    def sample(self) -> float:
        """One per-call time in ms."""
        if self.method == "perf_counter":
            begin, cpu = _perf_counter(), _thread_time()
            self.output = self.fn()
            self.cpu_samples.append((_thread_time() - cpu) * 1e3)
            return (_perf_counter() - begin) * 1e3
        start, end = self._events
        if self.method == "cuda_graph":
            # Work first, untimed (``cover``): the timed replay is queued behind it, so the
            # host's time to launch it (tens of µs) is not counted.
            if self.cover == "sleep" and _cuda_sleep is not None:
                _cuda_sleep(COVER_SLEEP_CYCLES)
            else:
                _graph_replay(self.graph)
            _event_record(start)
            _graph_replay(self.graph)
            _event_record(end)
            _event_wait(end)
            return float(_event_elapsed(start, end)) / self.calls_per_sample
        if self._flush is not None:
            self._flush.flush()
        _event_record(start)
        self.output = self.fn()
        # Device-wide: work the call left on other streams counts too.
        _cuda_synchronize()
        _event_record(end)
        _event_wait(end)
        return float(_event_elapsed(start, end))

    def once(self, fn: Callable[[], Any], around: Callable[[], Any] | None = None,
             whole: bool = False, flush: bool = True) -> tuple[float, Any]:
        """One call timed alone, the way the window times calls: with a captured graph, a replay
        of the one-call graph captured like it, or with ``whole`` of the timing graph itself
        (``calls_per_sample`` calls; ``fn`` is not called: the graph reads the same input
        buffers); else ``fn`` itself. On CUDA the L2 cache is flushed first and CUDA events
        bracket the call and a device-wide synchronize (a graph replay's end event follows it
        on its stream alone where ``replay_sync`` is off; where a gate is made, the start
        event, the replay and the end event are queued behind it, then let through, with no
        synchronize: ``gate``). ``around`` (a context manager factory)
        encloses the call and its synchronize, never the flush. ``flush=False`` skips the flush
        (the caches as the work before left them, as in a scored replay). Returns (ms, the
        call's output)."""
        graph = None
        if self.method == "cuda_graph":
            graph = self.graph if whole else (self._single[0] if self._single else None)
        call = (lambda: _graph_replay(graph)) if graph is not None else fn
        events = is_cuda(self.device) and self._events is not None and \
            self.method not in (None, "perf_counter")
        if events and flush and self._flush is not None:
            self._flush.flush()
        if events:  # nothing queued before (the flush, the inputs' copies) may start inside
            _cuda_synchronize()  # ``around``: its kernels would be counted as the call's
        gate = self._gate if events and graph is not None else None
        handle = _stream_handle() if gate is not None else None
        if _type(gate) is not StreamGate or handle is None or not gate.close(handle):
            gate = None
        try:
            with (around() if around is not None else _nullcontext()):
                if events:
                    start, end = self._events
                    _event_record(start)
                    output = call()
                    if gate is None and (graph is None or self.replay_sync):
                        # a forward's work on other streams ends before the end event; a
                        # graph's all ends on the stream it is replayed on
                        _cuda_synchronize()
                    _event_record(end)
                    if gate is not None:
                        gate.open()
                    _event_wait(end)
                    ms = float(_event_elapsed(start, end))
                else:
                    waited = runqueue_wait_ns()
                    begin, cpu = _perf_counter(), _thread_time()
                    output = call()
                    synchronize(self.device)
                    ms = (_perf_counter() - begin) * 1e3
                    self.last_cpu_ms = (_thread_time() - cpu) * 1e3
                    after = runqueue_wait_ns()
                    self.last_wait_ms = None if waited is None or after is None else \
                        min(ms, (after - waited) / 1e6)
        finally:
            if gate is not None and gate.closed:  # never a stream left waiting (a raise)
                gate.open()
        if graph is None:
            return ms, output
        return ms, (self.output if whole else self._single[1])

    def round(self, reps: int) -> list[float]:
        self._drop_spare("unused")  # the rounds began: no resize comes any more
        if self.queues() and self.after_sample is None:
            return self._queued_round(max(1, int(reps)))
        samples = []
        for _ in range(max(1, int(reps))):
            samples.append(self.sample())
            if self.after_sample is not None:
                self.after_sample()
        return samples

    def queues(self) -> bool:
        """Whether a round's graph samples are queued back to back (``COVERS``)."""
        if self.method != "cuda_graph":
            return False
        return self.cover == "queued" or (self.cover == "auto" and (self.estimate_ms or 0.0) *
                                          self.calls_per_sample >= QUEUE_SAMPLE_MS)

    def _queued_round(self, reps: int) -> list[float]:
        """``reps`` samples as replays queued back to back (``COVERS``' "queued"): one untimed
        replay, then each timed replay closed by an event that opens the next. The host waits
        once, for the last event."""
        if self._queue is None or len(self._queue) < reps + 1:
            self._queue = [_Event(enable_timing=True) for _ in range(reps + 1)]
        marks = self._queue
        _graph_replay(self.graph)
        _event_record(marks[0])
        for index in range(reps):
            _graph_replay(self.graph)
            _event_record(marks[index + 1])
        _event_wait(marks[reps])
        calls = self.calls_per_sample
        return [float(_event_elapsed(marks[index], marks[index + 1])) / calls
                for index in range(reps)]

    def warm(self, ms: float) -> int:
        """Run samples for about ``ms`` of wall time (clocks up, caches settled), at least two
        (one of a call of ``LONG_CALL_MS`` or more); how many. Their readings are kept
        (``warm_readings``) for ``planned_calls``."""
        done, deadline = 0, _perf_counter() + ms / 1e3
        least = 1 if (self.estimate_ms or 0.0) >= LONG_CALL_MS else 2
        readings = []
        while done < least or _perf_counter() < deadline:
            readings.append(self.sample())
            done += 1
        self.warm_readings = readings
        return done

    def settle(self, ms: float) -> int:
        """Untimed work for at least ``ms`` of wall time, as ``warm``, with the thread asleep
        for most of it: a graph timer queues the replays its estimate says fill
        ``SETTLE_QUEUED_SHARE`` of it and waits on a blocking event, then takes samples as
        ``warm`` does until ``ms`` have passed (one at least: the turn's samples follow a
        sample, as after ``warm``). Else ``warm``. How many replays and samples it ran."""
        self._drop_spare("unused")  # a turn's settling: the warm-up and any resize are over
        if self.method != "cuda_graph" or self.graph is None or not self.estimate_ms:
            return self.warm(ms)
        deadline = _perf_counter() + ms / 1e3
        per_replay = self.estimate_ms * self.calls_per_sample + SETTLE_LAUNCH_MS
        done = min(SETTLE_MAX_REPLAYS, int(ms * SETTLE_QUEUED_SHARE / per_replay))
        if done:
            if self._asleep is None:
                self._asleep = _Event(blocking=True)
            for _ in range(done):
                _graph_replay(self.graph)
            _event_record(self._asleep)
            _event_wait(self._asleep)
        self.sample()
        done += 1
        while _perf_counter() < deadline:
            self.sample()
            done += 1
        return done

    def loop(self, samples: int) -> None:
        """``samples`` samples' worth of work back to back, then a device-wide synchronize."""
        for _ in range(max(1, int(samples))):
            if self.graph is not None:
                _graph_replay(self.graph)
            else:
                self.output = self.fn()
        synchronize(self.device)

    def replay(self):
        """Rerun the work once (the graph when captured) and return its output."""
        if self.graph is not None:
            _graph_replay(self.graph)
        else:
            self.output = self.fn()
        synchronize(self.device)
        return self.output


# ---------------------------------------------------------------- in-process measurement

def measure(fn: Callable[[], Any], device: str, *, ci_target_pct: float = 0.5,
            cap_ms: float | None = None, round_reps: int = 10, min_reps: int = 10,
            max_reps: int = 2000, warm_ms: float | None = None, graph: bool = True,
            on_phase: Callable[[str], Any] | None = None, long_call_reps: int | None = None,
            prepared: Timer | None = None, **timer_options) -> dict:
    """Time ``fn`` alone: warm clocks, then rounds of samples until the median's 95% half-width
    is under ``ci_target_pct`` (after ``min_reps``), ``max_reps`` or ``cap_ms`` of wall time.
    ``on_phase(name)`` is called as each phase begins (``prepare``, ``warm``, ``samples``).
    ``long_call_reps``: a call whose estimate fills ``cap_ms`` in fewer samples than one round
    gets that many samples, or as many as fit in the cap if more (a describing measurement:
    the median of three 200 ms calls is as good as five for a runtime band).
    ``prepared``: a ``Timer`` of ``fn`` already prepared, maybe beside other work on the GPU;
    its graph is sized again from an estimate taken now (``Timer.resize``, phase ``resize``).

    Returns ``summarize(...)`` plus the timer's description (``calls_per_sample``, ``host_ms``,
    ``capture_error``)."""
    cuda = is_cuda(device)
    cap_ms = cap_ms if cap_ms is not None else (2000.0 if cuda else 300.0)
    warm_ms = warm_ms if warm_ms is not None else (100.0 if cuda else 0.0)
    phase = on_phase if on_phase is not None else (lambda name: None)
    if prepared is None:
        # a timer made here is never sized again: no spare graph for a resize (``Timer``)
        timer = Timer(fn, device, graph=graph, **{**timer_options, "spare": False})
        phase("prepare")
        info = timer.prepare()
    else:
        timer = prepared
        phase("resize")
        timer.resize()
        if is_cuda(device) and timer.host_reads_launch_bound():
            phase("host")
            timer.host_again()
        info = timer.describe()
    if warm_ms:
        phase("warm")
        timer.warm(warm_ms)
    phase("samples")
    floor = min(min_reps, 6)
    estimate = timer.estimate_ms or 0.0
    if long_call_reps and estimate * round_reps > cap_ms:
        floor = round_reps = min(round_reps, max(long_call_reps, int(cap_ms // estimate)))
    samples: list[float] = []
    deadline = _perf_counter() + cap_ms / 1e3
    while len(samples) < max_reps:
        samples.extend(timer.round(min(round_reps, max_reps - len(samples))))
        ci = median_ci_pct(samples)
        if len(samples) >= min_reps and ci is not None and ci <= ci_target_pct:
            break
        if _perf_counter() >= deadline and len(samples) >= floor:
            break
    return summarize(timer.method, samples, **{k: v for k, v in info.items()
                                               if k != "method"})
