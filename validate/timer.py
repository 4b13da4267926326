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

import contextlib
import gc
import math
from collections.abc import Callable
from typing import Any

from .measure import L2Flush, _capture_begin, _capture_end, _cuda_synchronize, _CUDAGraph
from .measure import _current_stream, _Event, _event_elapsed, _event_record, _event_wait
from .measure import _cuda_sleep, _graph_replay, _median, _nullcontext, _perf_counter
from .measure import _profiler_enabled, _Stream, _stream_ctx, _thread_time
from .measure import is_cuda, median_ci_pct, output_bytes, outputs_overlap, summarize, synchronize
from .measure import _cuda_get_device, _cuda_memory_stats, _process_time, _type
from .schedstat import runqueue_wait_ns
from .stream_gate import StreamGate, current_stream as _stream_handle, shared as _shared_gate
from .placement import PLACED_MAX_BYTES, PLACEMENTS, PLACING, PLACINGS  # noqa: F401 (re-exported)
from .placement import PlacementTurns, placed_copies, placement_count  # noqa: F401

# ---------------------------------------------------------------- the timer

PROBE_CALLS = 8  # calls in the larger of the two graphs that size a sample
# A call at least this long is timed with the least preparation: one warm-up, its host time
# and its estimate from one call each. Such a call is one call per sample whatever else is
# measured, and the nine calls of the full preparation (then 135 more to size a timing graph)
# made a 186 ms convolution's exclusive window 15 s on an H200, the whole GPU held meanwhile.
LONG_CALL_MS = 50.0
# A one-call graph whose replay takes this many ``sample_ms`` is one call per sample: the graph
# launch's fixed cost (about 20 µs) cannot bring its per-call time under ``sample_ms``, so the
# larger graph that differences that cost out is not captured or replayed.
LONG_REPLAY_SAMPLES = 4
# More than a graph launch's fixed cost and its events' (about 20 µs): a one-call replay, timed
# alone on the GPU, longer than a sample by this much holds a call of a sample or more
LAUNCH_MARGIN_MS = 0.1
# The most device memory the timing graph's held outputs may take: fewer calls per sample for
# a large output (a call of such a size is long enough that a handful fill a sample)
HELD_OUTPUT_BYTES = 256 << 20
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


def graph_calls(sample_ms: float, per_call_ms: float, most: int) -> int:
    """Calls captured in one timing graph: enough for ``sample_ms`` of device time, rounded up
    to a power of two (at most ``most``). Rounding keeps the count, and with it the share of a
    graph launch's fixed cost in each call, the same from one grade to the next although the
    estimate jitters; a small kernel always gets ``most``."""
    wanted = max(1, math.ceil(sample_ms / max(per_call_ms, 1e-6)))
    return int(min(most, 1 << (wanted - 1).bit_length()))


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


class Timer:
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

    def _captured(self, stream, calls: int):
        """A graph of ``calls`` calls and each call's output, all held while the later calls
        are captured: no call's output memory is handed to a later call."""
        graph, outputs = _CUDAGraph(), []
        with _stream_ctx(stream):
            _capture_begin(graph)
            try:
                for index in range(calls):
                    if self.place is not None:
                        self.place(index, calls)
                    outputs.append(self.fn())
            finally:
                if self.place is not None:
                    self.place(None, calls)
                _capture_end(graph)
        return graph, outputs

    def _calls_for(self, per_call_ms: float) -> int:
        """Calls per sample: ``graph_calls``, at most as many as ``HELD_OUTPUT_BYTES`` holds
        outputs for (a power of two), one where the calls' outputs shared memory."""
        if self.outputs_overlap:
            return 1
        calls = graph_calls(self.sample_ms, per_call_ms, self.max_calls)
        fit = HELD_OUTPUT_BYTES // max(1, output_bytes(self.output))
        return max(1, min(calls, 1 << (max(1, fit).bit_length() - 1)))

    def _timing_graph(self, stream, calls: int):
        """The timing graph of ``calls`` calls and its outputs; captured again with one call
        when two calls' outputs shared memory (a later call could then leave part of the
        output to an earlier one, and a replay's last output would not show it)."""
        graph, outputs = self._captured(stream, calls)
        if calls > 1 and outputs_overlap(outputs):
            self.outputs_overlap = True
            del graph, outputs
            graph, outputs = self._captured(stream, 1)
        return graph, outputs

    def _capture(self) -> None:
        stream = _Stream()
        try:
            stream.wait_stream(_current_stream())
            with _stream_ctx(stream):
                for _ in range(2):  # warm-up on the capture stream (allocator, lazy init)
                    self.fn()
            _cuda_synchronize()
            self.estimate_ms = self._per_call_ms(stream)
            graph, outputs = self._timing_graph(stream, self._calls_for(self.estimate_ms))
            _current_stream().wait_stream(stream)
            _graph_replay(graph)
            _cuda_synchronize()
        except Exception as exc:  # noqa: BLE001 — not capturable: time with events instead
            self.capture_error = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
            with contextlib.suppress(Exception):
                _cuda_synchronize()
            self.output = self.fn()
            _cuda_synchronize()
            return
        self.graph, self.outputs, self.output = graph, outputs, outputs[-1]
        self.calls_per_sample = len(outputs)
        self.method, self._stream = "cuda_graph", stream
        if self.spare_wanted:
            self._capture_spare(stream)

    def _capture_spare(self, stream) -> None:
        """The graph of twice the timing graph's calls (``_spare``): the count an estimate
        taken alone in the window asks for where the one taken beside other grades' work read a
        call up to twice too slow (other work only slows a call, and counts are powers of two:
        a call near 2 µs, 512 against 1,024; its capture again held the GPU alone 341 ms at the
        median in 40 of 98 windows, H100). Only for a timing graph of several calls (one call
        is a sample of ``sample_ms`` or more, which an estimate alone keeps), where ``max_calls``
        allows and both graphs' outputs together fit ``HELD_OUTPUT_BYTES``. Captured like the
        timing graph, every call witnessed; not replayed until taken up. Its outputs sharing
        memory, or its capture failing, leave none (``spare_graph`` in ``describe``)."""
        calls = 2 * self.calls_per_sample
        if self.outputs_overlap or self.calls_per_sample < 2 or calls > self.max_calls or \
                3 * self.calls_per_sample > HELD_OUTPUT_BYTES // max(1, output_bytes(self.output)):
            self.spare_state = "not captured"
            return
        try:
            graph, outputs = self._captured(stream, calls)
        except Exception:  # noqa: BLE001 — no spare: a resize captures as it would
            with contextlib.suppress(Exception):
                _cuda_synchronize()
            self.spare_state = "capture failed"
            return
        if outputs_overlap(outputs):
            self.spare_state = "outputs overlap"
            return
        self._spare, self.spare_state = (graph, outputs), "captured"

    def _drop_spare(self, state: str) -> None:
        if self._spare is not None:
            self._spare, self.spare_state = None, state

    def planned_calls(self) -> int | None:
        """A new estimate of one call, taken alone on the GPU (a window's warm-up turn), and
        the count of calls per sample it asks for when that is not the graph's; else None.
        ``prepare`` estimates while other work may share the GPU, and an estimate inflated by
        it sizes the graph to a call or two, whose replays then count a graph launch's fixed
        cost as the call's (an H100 read a 1.2 µs kernel at 13.1 µs that way once in 96
        grades)."""
        if self.method != "cuda_graph" or self._stream is None:
            return None
        readings, self.warm_readings = self.warm_readings, []
        if self.calls_per_sample == 1 and readings and \
                min(readings) >= self.sample_ms + LAUNCH_MARGIN_MS:
            # The warm-up's samples just taken alone are replays of a one-call graph, covered:
            # a call of a sample and more is one call per sample whatever a new estimate says,
            # and that estimate captured a one-call graph in the window and replayed it three
            # times, in every participant's warm-up turn (KernelBench's 1-9 ms forwards: the
            # warm-up 81-135 ms of a single's window, 300-990 ms of a group's of 8; H100)
            self.estimate_ms = min(readings)
            self._drop_spare("not needed")
            return None
        self.estimate_ms = self._per_call_ms(self._stream, alone=True)
        calls = self._calls_for(self.estimate_ms)
        if calls == self.calls_per_sample:
            self._drop_spare("not needed")  # its memory goes back before the rounds
            return None
        return calls

    def resize(self, calls: int | None = None) -> bool:
        """Capture the timing graph again with ``calls`` calls per sample (default: what
        ``planned_calls`` asks for); True if it did. The capture runs no kernel: a window
        lets its members capture side by side once every one has estimated alone."""
        if calls is None:
            calls = self.planned_calls()
        if not calls or self.method != "cuda_graph" or self._stream is None or \
                calls == self.calls_per_sample:
            return False
        self.graph = None  # its memory goes back to the pool before the new capture
        self.outputs, self.output = [], None
        spare, self._spare = self._spare, None
        if spare is not None and len(spare[1]) == int(calls):
            graph, outputs = spare  # captured in ``prepare``: no capture in the window
            self.spare_state = "taken up"
        else:
            if spare is not None:
                self.spare_state = "another count"
            del spare
            graph, outputs = self._timing_graph(self._stream, int(calls))
        _current_stream().wait_stream(self._stream)
        _graph_replay(graph)
        _cuda_synchronize()
        self.graph, self.outputs, self.output = graph, outputs, outputs[-1]
        self.calls_per_sample = len(outputs)
        return True

    def _per_call_ms(self, stream, alone: bool = False) -> float:
        """The device time of one call: back-to-back replays of a one-call and a
        ``PROBE_CALLS``-call graph, differenced, so a graph launch's fixed cost (about 20 µs on
        an H100, more than a small kernel) is not counted as the call's; a one-call replay of
        ``LONG_REPLAY_SAMPLES`` samples or more is the estimate itself, and ``alone`` on the
        GPU (a window's warm-up turn, where nothing else lengthens it) one of a sample and
        ``LAUNCH_MARGIN_MS`` or more: a sample is then one call whatever the difference would
        say, and the 145 calls of the full estimate were most of a window's warm-up for
        KernelBench's 1-4 ms forwards (the reference's and the candidate's turn each). The larger graph holds
        no more outputs than ``HELD_OUTPUT_BYTES`` allows the timing graph (none when that is
        one: the sample is one call whatever the estimate): eight outputs of a KernelBench
        level-1 problem are 51 GB (such a replay reserved 90 GB on an H200)."""
        start, end = self._events
        self._single = None  # an earlier one-call graph's memory goes before this capture
        most = min(PROBE_CALLS, HELD_OUTPUT_BYTES // max(1, output_bytes(self.output)))
        times = []
        for calls in (1, most):
            graph, outputs = self._captured(stream, calls)
            _graph_replay(graph)
            if calls == 1:
                _event_record(start)
                _graph_replay(graph)
                _event_record(end)
                _event_wait(end)
                once = float(_event_elapsed(start, end))
                enough = self.sample_ms + LAUNCH_MARGIN_MS if alone else \
                    LONG_REPLAY_SAMPLES * self.sample_ms
                for _ in range(2 if alone and once >= enough else 0):
                    # the least of three: one replay right after the capture may have met a
                    # clock still ramping up
                    _event_record(start)
                    _graph_replay(graph)
                    _event_record(end)
                    _event_wait(end)
                    once = min(once, float(_event_elapsed(start, end)))
                if once >= enough or most < 2:
                    self._single = (graph, outputs[-1])
                    return once
            # the least of three runs of 5 replays: work of other processes sharing the GPU
            # (another grade's checks; ``prepare`` runs beside them) only lengthens a run, and
            # an estimate twice too long sized a small kernel's graph to half its calls, which
            # the window's warm-up then captured again, alone on the GPU
            best = math.inf
            for _ in range(3):
                _event_record(start)
                for _ in range(5):
                    _graph_replay(graph)
                _event_record(end)
                _event_wait(end)
                best = min(best, float(_event_elapsed(start, end)) / 5)
            times.append(best)
            if calls == 1:
                self._single = (graph, outputs[-1])  # kept for ``once``
            del graph, outputs
        one, many = times
        return max((many - one) / (most - 1), many / most / 4, 1e-5)

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
