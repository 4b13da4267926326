"""The witness's reading of a finished profiler session: host records with their parents, and
each GPU kernel placed with the record that launched it (``read_events``), as ``Witness`` uses
them. Standard library and torch only."""
from __future__ import annotations

import bisect
import gc
import re
from contextlib import contextmanager

import torch


class _Span:
    __slots__ = ("start", "end")

    def __init__(self, start: float, end: float):
        self.start, self.end = start, end


class _Kernel:
    __slots__ = ("name", "duration", "start", "launched_at")

    def __init__(self, name: str, duration: float, start: float = 0.0,
                 launched_at: float | None = None):
        self.name, self.duration, self.start = name, duration, start
        self.launched_at = launched_at  # host time of its runtime call, when it had one


# A kernel replayed from a captured CUDA graph ran where the graph was captured, not where it is
# replayed: whatever range is open at the replay, it is nobody's launch.
_GRAPH_LAUNCH = re.compile(r"GraphLaunch")


# CUDA runtime and driver API records (CUPTI's callback names): a launch's host side.
_RUNTIME = re.compile(r"^cu(?:da)?[A-Z]")


class _Record:
    """One host-side profiler record, with the fields ``Witness.per_call`` reads (the names
    of ``torch.autograd.profiler_util.FunctionEvent``'s)."""
    __slots__ = ("name", "time_range", "is_user_annotation", "cpu_parent", "kernels",
                 "device_type", "_ns", "_children", "thread")

    def __init__(self, name, start_ns, end_ns, base_ns, annotation, thread=0):
        self.name, self.is_user_annotation = name, annotation
        self.time_range = _Span((start_ns - base_ns) / 1e3, (end_ns - base_ns) / 1e3)
        self.cpu_parent, self.kernels, self.device_type = None, [], None
        self._ns, self._children, self.thread = (start_ns, end_ns), [], thread


_SKIPPED = frozenset({"[memory]", "[OutOfMemory]", "profiler::_record_function_enter",
                      "profiler::_record_function_enter_new", "profiler::_record_function_exit",
                      "aten::is_leaf", "aten::output_nr", "aten::_version"})


@contextmanager
def _no_collection():
    """Tens of thousands of small objects made at once: the cyclic collector would rescan
    them over and over (half the time spent reading a session)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def read_events(results, base_ns: int, loose: list | None = None) -> list[_Record]:
    """The host records of a finished session, each with its parent (the innermost record
    around it on its thread) and the kernels it launched, as the profiler's own
    ``function_events`` gives them, in one pass over the raw records (that one builds a full
    Python event per record: about 80 µs each, seconds for a timing window's worth).

    A kernel belongs to the op it is linked to; else to the innermost record around its
    runtime call on the launching thread (Kineto links kernels to ops only, never to user
    ranges: a Triton launch or a graph replay outside any op is linked to nothing). Kernels
    whose launch cannot be placed go to ``loose``."""
    cpu_type = torch._C._autograd.DeviceType.CPU
    host, by_id, device, threads, runtime = [], {}, [], {}, {}
    for event in results.events():
        name = event.name()
        if name in _SKIPPED or event.is_hidden_event():
            continue
        if event.device_type() != cpu_type:
            if not event.is_user_annotation():
                device.append((event.correlation_id(), event.linked_correlation_id(), name,
                               event.duration_ns() / 1e3, event.start_ns()))
            continue
        if not event.is_user_annotation() and _RUNTIME.match(name):
            runtime[event.correlation_id()] = (event.start_thread_id(), event.start_ns(),
                                               event.linked_correlation_id(), name)
            continue
        if event.linked_correlation_id() > 0:
            continue  # another runtime-side record linked to an op: never around an op
        record = _Record(name, event.start_ns(), event.end_ns(), base_ns,
                         event.is_user_annotation(), event.start_thread_id())
        host.append(record)
        if event.is_async() or event.start_thread_id() != event.end_thread_id():
            continue  # no parent, as the profiler's own tree has none for them
        by_id[event.correlation_id()] = record
        threads.setdefault(event.start_thread_id(), []).append(record)
    for records in threads.values():
        records.sort(key=lambda r: (r._ns[0], -r._ns[1]))
        stack: list[_Record] = []
        for record in records:
            start, end = record._ns
            while stack and (start >= stack[-1]._ns[1] or end > stack[-1]._ns[1]):
                stack.pop()
            if stack:
                record.cpu_parent = stack[-1]
                stack[-1]._children.append(record)
            stack.append(record)
    _place_kernels(device, runtime, by_id, threads, base_ns, loose)
    host.sort(key=lambda r: (r._ns[0], -r._ns[1]))
    # As the profiler's tree does: an op whose only child is the same op (a redispatch to
    # another overload) is one node, with the inner one's children and kernels.
    merged = set()
    for record in host:
        parent = record.cpu_parent
        if parent is not None and parent.name == record.name and len(parent._children) == 1:
            parent._children = record._children
            parent.kernels = [*parent.kernels, *record.kernels]
            for child in record._children:
                child.cpu_parent = parent
            merged.add(id(record))
    return [r for r in host if id(r) not in merged] if merged else host


def _busy(intervals: list[tuple[float, float]]) -> float:
    """The time covered by ``(start, duration)`` intervals sorted by start (overlaps once)."""
    total, reach = 0.0, float("-inf")
    for start, duration in intervals:
        end = start + duration
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def _innermost(records: list[_Record], starts: list[int], at: int) -> _Record | None:
    """The innermost record of one thread open at ``at`` (records sorted by start, nested)."""
    index = bisect.bisect_right(starts, at) - 1
    record = records[index] if index >= 0 else None
    while record is not None and not (record._ns[0] <= at <= record._ns[1]):
        record = record.cpu_parent
    return record


def _place_kernels(device, runtime, by_id, threads, base_ns, loose) -> None:
    """Give each kernel to the record that launched it (see ``read_events``). A kernel replayed
    from a CUDA graph, or with no runtime call to place it, goes to ``loose``."""
    # The runtime's thread ids are the system's; the profiler's own may differ: map them
    # through runtime calls made inside a known op.
    thread_of = {tid: by_id[linked].thread for tid, _at, linked, _n in runtime.values()
                 if linked > 0 and linked in by_id}
    starts = {tid: [r._ns[0] for r in records] for tid, records in threads.items()}
    for correlation, linked, name, us, start_ns in device:
        kernel = _Kernel(name, us, (start_ns - base_ns) / 1e3)
        launch = runtime.get(correlation)
        replayed = launch is not None and bool(_GRAPH_LAUNCH.search(launch[3]))
        owner = by_id.get(linked) if linked > 0 and not replayed else None
        if launch is not None:
            tid, at, op, _name = launch
            kernel.launched_at = (at - base_ns) / 1e3
            if owner is None and not replayed:
                owner = by_id.get(op) if op > 0 else None
            if owner is None and not replayed:
                mapped = thread_of.get(tid)
                found = [r for t in ([mapped] if mapped in threads else threads)
                         if (r := _innermost(threads[t], starts[t], at)) is not None]
                owner = max(found, key=lambda r: r._ns[0]) if found else None
        if owner is not None:
            owner.kernels.append(kernel)
        elif loose is not None:
            loose.append(kernel)
