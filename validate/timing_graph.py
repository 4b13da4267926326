"""The timer's CUDA graphs (``TimingGraphs``, a base of ``timer.Timer``): how many calls one
sample's graph holds, their capture with every call's output held, the estimate of one call
that sizes it, and its capture again from an estimate taken alone in a window (``resize``, a
spare of twice the calls taken up where it fits).

The methods read the timer's own state (``fn``, ``place``, ``sample_ms``, ``max_calls``,
``output``, ``_events``) and set its graph (``graph``, ``outputs``, ``calls_per_sample``,
``method``, ``_stream``, ``_single``, ``_spare``). Every function they call is bound from
``validate.measure`` at import, as the timer's are; a candidate's run in the grader's worker
calls a private copy of this module with the timer's.

Imports only the standard library and ``validate.measure``.
"""
from __future__ import annotations

import contextlib
import math

from .measure import (
    _capture_begin,
    _capture_end,
    _cuda_synchronize,
    _CUDAGraph,
    _current_stream,
    _event_elapsed,
    _event_record,
    _event_wait,
    _graph_replay,
    _Stream,
    _stream_ctx,
    output_bytes,
    outputs_overlap,
)

PROBE_CALLS = 8  # calls in the larger of the two graphs that size a sample
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


def graph_calls(sample_ms: float, per_call_ms: float, most: int) -> int:
    """Calls captured in one timing graph: enough for ``sample_ms`` of device time, rounded up
    to a power of two (at most ``most``). Rounding keeps the count, and with it the share of a
    graph launch's fixed cost in each call, the same from one grade to the next although the
    estimate jitters; a small kernel always gets ``most``."""
    wanted = max(1, math.ceil(sample_ms / max(per_call_ms, 1e-6)))
    return int(min(most, 1 << (wanted - 1).bit_length()))


class TimingGraphs:
    """The capture and sizing of ``timer.Timer``'s timing graph (see the module docstring)."""

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
