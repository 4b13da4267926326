"""Worker side: what PyTorch ran during each candidate call, whatever the dispatch-key state.

A ``TorchDispatchMode`` sees only the ops that reach the Python dispatch key. Work below it is
invisible to the mode: the body of an op the candidate registered (``torch.library`` in Python,
``TORCH_LIBRARY`` in C++) runs after the mode has handled the op itself; a guard that excludes
the Python key (``torch._C._DisableTorchDispatch``, ``_ExcludeDispatchKeyGuard``) hides every op
inside it. The profiler's RecordFunction callbacks run in the dispatcher itself, before any key
is chosen, on every thread, nested ops included, so ``Witness`` records every op the dispatcher
ran in each call. What skips the dispatcher altogether (``at::cpu::``/``at::native::`` called from
native code, Python loops over raw elements) is flagged elsewhere (``static``; the host-access
counters in ``worker``).

The profiler runs through every candidate call, checked and timed alike, so the candidate
cannot tell a checked call from a timed one by it (it pauses only while a captured CUDA graph
is replayed, where no candidate Python runs); each call is a user range named ``FORWARD``
and each Triton launch a range named ``LAUNCH`` (the interpreter's own copies on CPU live there).

On CUDA the session records every GPU kernel through CUPTI (Kineto). Each kernel belongs to
the record that was innermost on the launching thread when its runtime call (``cudaLaunchKernel``,
``cuLaunchKernelEx``, ``cudaGraphLaunch``...) was made: an op (the op's kernels), a Triton
launch, an extension call, or the call's own range (launched outside all of them: a replayed
CUDA graph, a compiled graph's runtime, driver calls through an FFI). A kernel whose launch
cannot be placed is given to the call whose time it ran in, with no owner. ``SPAN`` ranges time
work by the device's own clock: the durations of the kernels that started inside each.

Ops are classified by registration, not by namespace: an op the dispatcher knew before the
candidate's source was imported is a library op (``aten``, ``prims``, but also ``mkldnn``,
``mkl``, ``onednn``, ``quantized``...); an op registered later is the candidate's own.

Standard library and torch only.
"""
from __future__ import annotations

import bisect
from contextlib import contextmanager
from time import perf_counter as _perf_counter  # bound at import, as the harness's

import torch

from .events import (
    _busy,
    _Kernel,
    _no_collection,
    read_events,
)

FORWARD = "kernelmill.forward"
LAUNCH = "kernelmill.launch"
EXT = "kernelmill.extension"
SPAN = "kernelmill.span"  # work timed by its kernels' device durations (``Witness.span_us``)
# A kernel of the worker's that ran this long (µs) within a span where it had stepped aside for
# other grades' windows (``observers.launches._install_compile_aside``; the spans are the channel
# writer's: ``harness_worker.ASIDE_SPANS_EVENT``) ran inside another grade's window. The margin
# is the clocks' (the device's times placed on the host's by the profiler); the writer
# synchronised the device as each span began and ended, so honest work is outside by more.
ASIDE_MARGIN_US = 50.0
# Owner of GPU kernels linked to a call's own range: launched outside any op, Triton launch or
# extension call (a compiled graph's runtime such as AOTInductor's, driver calls through an FFI).
UNATTRIBUTED = "unattributed"

# The ops' C callables (``_op``): calling the Python op objects runs ``self._op``, an instance
# attribute a submission can replace to run PyTorch after the range has closed (T-11)
_range_enter = torch.ops.profiler._record_function_enter_new._op
_range_exit = torch.ops.profiler._record_function_exit._RecordFunction._op
_no_subclass_function = torch._C.DisableTorchFunctionSubclass
_cupti_monitor = getattr(torch.autograd.profiler, "_maybe_cupti_monitor", lambda: None)


def _open_range(name: str) -> tuple:
    """Open a profiler range named ``name`` (and its CUPTI annotation) by the ops bound at
    import; ``_close_range`` closes it."""
    record = _range_enter(name, None)
    monitor = _cupti_monitor()
    annotated = monitor.push_user_annotation(name) if monitor is not None else None
    return record, monitor if annotated is not None else None


def _close_range(opened: tuple) -> None:
    record, monitor = opened
    if monitor is not None:
        monitor.pop_user_annotation()
    with _no_subclass_function():
        _range_exit(record)


@contextmanager
def _record_function(name: str):
    """``torch.autograd.profiler.record_function`` with its ops bound at import: the profiler
    range closes through an op looked up by name at every exit (``torch.ops.profiler...``), which
    a submission replaced to run PyTorch after the range had closed."""
    opened = _open_range(name)
    try:
        yield
    finally:
        _close_range(opened)
_all_op_names = torch._C._dispatch_get_all_op_names
_include = torch._C._dispatch_tls_local_include_set
_exclude = torch._C._dispatch_tls_local_exclude_set
_profiler_enabled = torch._C._autograd._profiler_enabled


def _merged(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """``spans`` (from, to) sorted and merged where they overlap; empty ones left out."""
    merged: list[list[float]] = []
    for start, end in sorted(s for s in spans if s[1] > s[0]):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(start, end) for start, end in merged]


def op_qualname(name: str) -> str:
    """``aten::add.Tensor`` / ``aten.add.Tensor`` / ``aten::add`` -> ``aten::add``."""
    name = name.replace("::", ".", 1)
    parts = name.split(".")
    return f"{parts[0]}::{parts[1]}" if len(parts) > 1 else name


def dispatch_state() -> str:
    """The thread's local dispatch-key include and exclude sets (guards change them)."""
    return f"{_include()}|{_exclude()}"



class Witness:
    """Records every dispatcher op run inside ``call()`` ranges, call by call."""

    def __init__(self, device: str = "cpu"):
        # Taken before the candidate is imported: everything registered later is the candidate's.
        self.library_ops = frozenset(op_qualname(n) for n in _all_op_names())
        self.cuda = device.startswith("cuda")
        self.calls = 0
        self.error: str | None = None  # the witness was tampered with (a hack)
        self.unavailable: str | None = None  # this machine could not run it (a downgrade)
        self._profile = None
        self._sessions: list = []  # sessions ended by ``pause``, read at ``stop``
        self.unwitnessed = 0  # calls made while no session ran
        self._events: list | None = None
        self._base_ns: int | None = None  # the sessions' first start (the records' zero)
        # (began, ended) in ns by the records' clock: where the worker's GPU work stepped aside
        # (``per_call`` holds the kernels to them)
        self.aside_spans_ns: list = []
        self._loose: list[_Kernel] = []  # kernels whose launch could not be placed
        self.span_counts: list[int] = []  # kernels found in each ``span`` range, by ``span_us``
        self.span_overlap_us: list[float] = []  # µs the runs of each span overlapped
        self.span_run_names: list = []  # each span's runs' kernel names, sorted (None: uneven)
        self.stray: dict[str, int] = {}  # ops outside every call range (nested ones too)
        # what reading the sessions cost: host records read, and seconds reading them
        # (``read_events``) and placing them call by call (``per_call``), for the profile
        self.cost: dict = {"records": 0, "read_s": 0.0, "calls_s": 0.0}

    def start(self) -> None:
        """On CUDA the session also records every GPU kernel (CUPTI through Kineto), each
        linked to the innermost range that launched it: a Triton launch, an extension call or
        a library op."""
        # use_kineto: without it a CUDA session times each op with CUDA events and records
        # no kernel at all (the legacy profiler; measured on torch 2.11)
        attempts = [{"use_device": "cuda", "use_kineto": True}, {}] if self.cuda else [{}]
        for options in attempts:
            try:
                self._profile = torch.autograd.profiler.profile(record_shapes=False, **options)
                self._profile.__enter__()
                if options != attempts[0]:
                    self.unavailable = "no GPU kernel records (CUPTI did not start)"
                return
            except Exception as exc:  # noqa: BLE001 — the machine's fault, not the candidate's
                self.unavailable = f"profiler did not start: {type(exc).__name__}: {exc}"[:300]
                self._profile = None

    @staticmethod
    def extension():
        return _record_function(EXT)

    @contextmanager
    def call(self):
        record = self.open_call()
        try:
            yield
        finally:
            self.close_call(record)

    def open_call(self):
        """Open a candidate call's range (``close_call`` closes it): with no context manager,
        whose exit runs Python (``contextlib``'s) after the range has closed, where a
        submission that reaches that Python (a module-dict key of its own on ``contextlib``'s
        ``StopIteration`` lookup) runs PyTorch unobserved (T-11)."""
        self.calls += 1
        if self._profile is None and self._sessions:
            self.unwitnessed += 1  # after a session that did not resume (``unavailable``)
        return _open_range(FORWARD)

    @staticmethod
    def close_call(opened) -> None:
        _close_range(opened)

    @staticmethod
    def launch(name: str = ""):
        """A Triton launch of the JIT function ``name``: only kernels of that name launched
        inside it are the launch's own (a hook, grid function or allocator runs Python inside a
        launch); with no name, none are."""
        return _record_function(f"{LAUNCH}:{name}")

    @staticmethod
    def span():
        return _record_function(SPAN)

    @property
    def running(self) -> bool:
        return self._profile is not None

    def pause(self) -> None:
        """End the current session, keeping what it recorded, until ``resume``. Only for work
        in which no candidate Python runs (replays of a captured CUDA graph): there the kernel
        records would cost seconds to read and tell nothing the checked calls did not."""
        if self._profile is None:
            return
        if not _profiler_enabled() and self.error is None:
            self.error = "the profiler was switched off during the calls"
        try:
            self._profile.__exit__(None, None, None)
            self._sessions.append(self._profile)
        except Exception as exc:  # noqa: BLE001 — a candidate that stopped our profiler
            self.error = f"profiler stopped early: {type(exc).__name__}: {exc}"[:300]
        self._profile = None

    def resume(self) -> None:
        if self._profile is None and self.error is None and self._sessions:
            self.start()
            if self._profile is None:
                self.unavailable = f"profiler did not resume: {self.unavailable}"[:300]

    def stop(self) -> None:
        self.pause()
        if self._sessions and self.error is None:
            try:
                base = self._base_ns = min(s.kineto_results.trace_start_ns()
                                           for s in self._sessions)
                began = _perf_counter()
                with _no_collection():
                    self._events = [e for s in self._sessions
                                    for e in read_events(s.kineto_results, base, self._loose)]
                self.cost["read_s"] = _perf_counter() - began
                self.cost["records"] = len(self._events)
            except Exception as exc:  # noqa: BLE001
                self.error = f"profiler records unreadable: {type(exc).__name__}: {exc}"[:300]
        self._sessions = []

    def per_call(self) -> list[dict] | None:
        """For each ``call()`` range, in order: ``ops`` (dispatcher ops outside Triton launches,
        ``ns.name`` form) with ``op_roots`` (the top-level op each ran inside), ``launch_ops``
        (ops inside launches), ``top_op_us`` (top-level ops' CPU times), ``launch_us`` (time in
        the candidate's launches and extension calls) and, on CUDA, ``kernels`` ([name, us,
        owner]: owner ``triton``, ``extension``, the launching op, or ``UNATTRIBUTED`` for a
        kernel launched directly inside the call). None without a witness."""
        if self._events is None:
            return None
        began = _perf_counter()
        with _no_collection():
            calls = self._per_call()
        self.cost["calls_s"] = _perf_counter() - began
        return calls

    def _per_call(self) -> list[dict]:
        ranges, launches, ops, owners = [], [], [], []
        for event in self._events:
            if getattr(event, "device_type", None) is not None and \
                    str(event.device_type).endswith("CUDA"):
                continue  # device-side records: reached through their launching event below
            start, end = event.time_range.start, event.time_range.end
            annotation = event.is_user_annotation
            if event.name == FORWARD and annotation:
                ranges.append((start, end))
                owners.append((start, end, UNATTRIBUTED, event))
            elif annotation and (event.name == LAUNCH or event.name.startswith(LAUNCH + ":")):
                launches.append((start, end))
                owners.append((start, end, "triton", event))
            elif event.name == EXT and annotation:
                owners.append((start, end, "extension", event))
            elif not annotation and "::" in event.name:
                parent = event.cpu_parent
                top = parent is None or parent.is_user_annotation
                root = event
                while root.cpu_parent is not None and not root.cpu_parent.is_user_annotation:
                    root = root.cpu_parent
                ops.append((start, event.name, end - start, top, root.name))
                owners.append((start, end, event.name.replace("::", ".", 1), event))
        ranges.sort()
        if len(ranges) != self.calls - self.unwitnessed:
            self.error = (f"{self.calls} calls but {len(ranges)} recorded: the profiler was "
                          "stopped or tampered with")
        launches.sort()
        starts = [r[0] for r in ranges]
        launch_starts = [r[0] for r in launches]
        result = [{"ops": [], "op_roots": [], "launch_ops": [], "top_op_us": [],
                   "launch_us": 0.0, "kernels": []} for _ in ranges]
        intervals: list[list[tuple[float, float]]] = [[] for _ in ranges]

        def call_of(at: float) -> int:
            index = bisect.bisect_right(starts, at) - 1
            return index if index >= 0 and at <= ranges[index][1] else -1

        stray: dict[str, int] = {}
        for at, name, span, top, root in ops:
            index = call_of(at)
            if index < 0:  # outside every candidate call: the harness's own work, or not
                # every op, nested ones too: the harness's copies run copies and allocations
                # inside, where an op of the submission's that the profiler names as a copy
                # (an overload it defined, ``aten::copy_.mine``) runs its compute
                qualname = name.replace("::", ".", 1)
                stray[qualname] = stray.get(qualname, 0) + 1
                continue
            inner = bisect.bisect_right(launch_starts, at) - 1
            key = "launch_ops" if inner >= 0 and at <= launches[inner][1] else "ops"
            result[index][key].append(name.replace("::", ".", 1))
            if key == "ops":  # the top-level op this one ran inside (itself when top-level)
                result[index]["op_roots"].append(root.replace("::", ".", 1))
            if key == "ops" and top:
                result[index]["top_op_us"].append([name.replace("::", ".", 1), float(span)])
        for start, end, owner, event in owners:
            index = call_of(start)
            if index < 0:  # the harness launches nothing outside the calls
                if owner in ("triton", "extension"):
                    stray[event.name] = stray.get(event.name, 0) + 1
                continue
            if owner in ("triton", "extension"):
                result[index]["launch_us"] += float(end - start)
            # ``LAUNCH:name``: only kernels of that name (an unknown name: none) are its own
            named, launched = event.name.partition(":")[1:] if owner == "triton" else ("", "")
            for kernel in getattr(event, "kernels", None) or []:
                mine = owner if not named or (launched and str(kernel.name) == launched) \
                    else UNATTRIBUTED
                result[index]["kernels"].append(
                    [str(kernel.name)[:200], float(kernel.duration), mine])
                intervals[index].append((float(kernel.start), float(kernel.duration)))
        for kernel in self._loose:  # replayed from a graph, or launched who knows where
            # the call whose range held its runtime call (a graph replayed by the harness,
            # outside every call, is nobody's); without one, the call it ran in
            index = call_of(kernel.launched_at) if kernel.launched_at is not None else \
                bisect.bisect_right(starts, kernel.start) - 1
            if index >= 0:
                result[index]["kernels"].append(
                    [str(kernel.name)[:200], float(kernel.duration), UNATTRIBUTED])
                intervals[index].append((float(kernel.start), float(kernel.duration)))
        for entry, found in zip(result, intervals):  # the time the call kept the GPU busy
            entry["busy_us"] = _busy(sorted(found)) if found else 0.0
        self.stray = stray
        self._aside_kernels()
        return result

    def _all_kernels(self) -> list:
        """Every kernel the sessions recorded: those placed with a record, then the loose."""
        return [*(k for e in self._events for k in (getattr(e, "kernels", None) or [])),
                *self._loose]

    def _aside_kernels(self, margin_us: float = ASIDE_MARGIN_US) -> None:
        """The witness's error where a kernel of the worker's ran on the device for more than
        ``margin_us`` within a span where it had stepped aside (``aside_spans_ns``): it had
        reported its GPU work done, and another grade's window may have taken the GPU."""
        if not self.aside_spans_ns or self._base_ns is None:
            return
        spans = _merged([((began - self._base_ns) / 1e3 + margin_us,
                          (ended - self._base_ns) / 1e3 - margin_us)
                         for began, ended in self.aside_spans_ns])
        starts = [start for start, _end in spans]
        found = 0
        for kernel in self._all_kernels():
            begins, ends = float(kernel.start), float(kernel.start) + float(kernel.duration)
            index = bisect.bisect_right(starts, ends) - 1  # the last span begun before it ended
            found += index >= 0 and spans[index][1] > begins
        if found and self.error is None:
            self.error = (f"{found} GPU kernel(s) ran while the worker had stepped aside for "
                          "another grade's timing window (during a Triton compile)")

    def span_us(self, calls: int = 1) -> list[float | None] | None:
        """For each ``span()`` range, in order: the device time (µs) its first call's kernels
        kept the GPU busy, by their own start times and durations (the kernels that started
        inside the span, whoever launched them, split into ``calls`` equal runs in start order;
        kernels that overlap count once, so padding a call with kernels on other streams adds
        nothing). None for a span whose kernels do not split evenly. None without a witness."""
        per_call = self.span_calls_us(calls)
        if per_call is None:
            return None
        return [None if busy is None else busy[0] for busy in per_call]

    def span_calls_us(self, calls: int | list[int] = 1) -> list[list[float] | None] | None:
        """For each ``span()`` range, in order: the busy time (µs) of each of its ``calls``
        (one count for every range, or a list of each range's) equal runs of kernels in start
        order (``span_us`` keeps the first), or None where the
        kernels do not split evenly. Sets ``span_counts`` (kernels per span), ``span_busy_us``
        (the busy time of all its kernels, the gaps between them left out), ``span_overlap_us`` and ``span_run_names``
        (each run's kernel names, sorted). None without a witness."""
        if self._events is None:
            return None
        spans = sorted((e.time_range.start, e.time_range.end) for e in self._events
                       if e.name == SPAN and e.is_user_annotation)
        starts = [s for s, _e in spans]
        inside: list[list] = [[] for _ in spans]
        for kernel in self._all_kernels():
            index = bisect.bisect_right(starts, kernel.start) - 1
            if index >= 0 and kernel.start <= spans[index][1]:
                inside[index].append((float(kernel.start), float(kernel.duration),
                                      str(kernel.name)[:200]))
        result: list[list[float] | None] = []
        self.span_counts = [len(found) for found in inside]
        # the time the span's kernels kept the GPU busy (overlapping ones counted once), the
        # idle gaps between them left out: with the witness on, a graph replay's kernels are
        # paced by the launching thread, and on a busy host its gaps read an honest replay
        # 2-17x longer than its kernels (H200, two GPUs graded at once)
        self.span_busy_us = [_busy(sorted((start, us) for start, us, _n in found))
                             if found else None for found in inside]
        self.span_overlap_us = []
        self.span_run_names = []
        counts = calls if isinstance(calls, list) else [calls] * len(inside)
        for index, found in enumerate(inside):
            found.sort()
            calls = max(1, counts[index] if index < len(counts) else 1)
            if len(found) % calls:
                result.append(None)
                self.span_overlap_us.append(0.0)
                self.span_run_names.append(None)
                continue
            step = len(found) // calls
            runs = [found[i * step:(i + 1) * step] for i in range(calls)]
            busy = [_busy([(start, us) for start, us, _name in run]) for run in runs]
            self.span_run_names.append([sorted(name for _s, _u, name in run) for run in runs])
            # runs that overlap in time (a call's kernels still running beside the next
            # call's) count their shared time in each run: the sum exceeds the whole's busy
            self.span_overlap_us.append(
                max(0.0, sum(busy) - _busy([(start, us) for start, us, _name in found])))
            result.append(busy)
        return result

    def candidate_ops(self, names) -> list[str]:
        """The names (any form) of ops registered after the candidate's import began."""
        return sorted({n for n in names if op_qualname(n) not in self.library_ops})
