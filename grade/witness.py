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

Ops are classified by registration, not by namespace: an op the dispatcher knew before the
candidate's source was imported is a library op (``aten``, ``prims``, but also ``mkldnn``,
``mkl``, ``onednn``, ``quantized``...); an op registered later is the candidate's own.

Standard library and torch only.
"""
from __future__ import annotations

import bisect
import gc
from contextlib import contextmanager

import torch

FORWARD = "kernelmill.forward"
LAUNCH = "kernelmill.launch"
EXT = "kernelmill.extension"
# Owner of GPU kernels linked to a call's own range: launched outside any op, Triton launch or
# extension call (a compiled graph's runtime such as AOTInductor's, driver calls through an FFI).
UNATTRIBUTED = "unattributed"

_record_function = torch.autograd.profiler.record_function
_all_op_names = torch._C._dispatch_get_all_op_names
_include = torch._C._dispatch_tls_local_include_set
_exclude = torch._C._dispatch_tls_local_exclude_set
_profiler_enabled = torch._C._autograd._profiler_enabled


def op_qualname(name: str) -> str:
    """``aten::add.Tensor`` / ``aten.add.Tensor`` / ``aten::add`` -> ``aten::add``."""
    name = name.replace("::", ".", 1)
    parts = name.split(".")
    return f"{parts[0]}::{parts[1]}" if len(parts) > 1 else name


def dispatch_state() -> str:
    """The thread's local dispatch-key include and exclude sets (guards change them)."""
    return f"{_include()}|{_exclude()}"


class _Span:
    __slots__ = ("start", "end")

    def __init__(self, start: float, end: float):
        self.start, self.end = start, end


class _Kernel:
    __slots__ = ("name", "duration")

    def __init__(self, name: str, duration: float):
        self.name, self.duration = name, duration


class _Record:
    """One host-side profiler record, with the fields ``Witness.per_call`` reads (the names
    of ``torch.autograd.profiler_util.FunctionEvent``'s)."""
    __slots__ = ("name", "time_range", "is_user_annotation", "cpu_parent", "kernels",
                 "device_type", "_ns", "_children")

    def __init__(self, name, start_ns, end_ns, base_ns, annotation):
        self.name, self.is_user_annotation = name, annotation
        self.time_range = _Span((start_ns - base_ns) / 1e3, (end_ns - base_ns) / 1e3)
        self.cpu_parent, self.kernels, self.device_type = None, [], None
        self._ns, self._children = (start_ns, end_ns), []


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


def read_events(results, base_ns: int) -> list[_Record]:
    """The host records of a finished session, each with its parent (the innermost record
    around it on its thread) and the device records linked to it, as the profiler's own
    ``function_events`` gives them, in one pass over the raw records (that one builds a full
    Python event per record: about 80 µs each, seconds for a timing window's worth)."""
    cpu_type = torch._C._autograd.DeviceType.CPU
    host, by_id, device, threads = [], {}, [], {}
    for event in results.events():
        name = event.name()
        if name in _SKIPPED or event.is_hidden_event():
            continue
        linked = event.linked_correlation_id()
        if event.device_type() != cpu_type:
            if linked > 0 and not event.is_user_annotation():
                device.append((linked, name, event.duration_ns() / 1e3))
            continue
        if linked > 0:
            continue  # a runtime call (a kernel launch, a copy): never around an op
        record = _Record(name, event.start_ns(), event.end_ns(), base_ns,
                         event.is_user_annotation())
        host.append(record)
        if event.is_async() or event.start_thread_id() != event.end_thread_id():
            continue  # no parent, as the profiler's own tree has none for them
        by_id[event.correlation_id()] = record
        threads.setdefault(event.start_thread_id(), []).append(record)
    for linked, name, us in device:
        owner = by_id.get(linked)
        if owner is not None:
            owner.kernels.append(_Kernel(name, us))
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
    host.sort(key=lambda r: (r._ns[0], -r._ns[1]))
    # As the profiler's tree does: an op whose only child is the same op (a redispatch to
    # another overload) is one node, with the inner one's children and kernels.
    merged = set()
    for record in host:
        parent = record.cpu_parent
        if parent is not None and parent.name == record.name and len(parent._children) == 1:
            parent._children, parent.kernels = record._children, record.kernels
            for child in record._children:
                child.cpu_parent = parent
            merged.add(id(record))
    return [r for r in host if id(r) not in merged] if merged else host


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

    def start(self) -> None:
        """On CUDA the session also records every GPU kernel (CUPTI through Kineto), each
        linked to the innermost range that launched it: a Triton launch, an extension call or
        a library op."""
        attempts = [{"use_device": "cuda"}, {}] if self.cuda else [{}]
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
        self.calls += 1
        if self._profile is None and self._sessions:
            self.unwitnessed += 1  # after a session that did not resume (``unavailable``)
        with _record_function(FORWARD):
            yield

    @staticmethod
    def launch():
        return _record_function(LAUNCH)

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
                base = min(s.kineto_results.trace_start_ns() for s in self._sessions)
                with _no_collection():
                    self._events = [e for s in self._sessions
                                    for e in read_events(s.kineto_results, base)]
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
        with _no_collection():
            return self._per_call()

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
            elif event.name == LAUNCH and annotation:
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

        def call_of(at: float) -> int:
            index = bisect.bisect_right(starts, at) - 1
            return index if index >= 0 and at <= ranges[index][1] else -1

        for at, name, span, top, root in ops:
            index = call_of(at)
            if index < 0:
                continue  # outside every candidate call: the harness's own copies
            inner = bisect.bisect_right(launch_starts, at) - 1
            key = "launch_ops" if inner >= 0 and at <= launches[inner][1] else "ops"
            result[index][key].append(name.replace("::", ".", 1))
            if key == "ops":  # the top-level op this one ran inside (itself when top-level)
                result[index]["op_roots"].append(root.replace("::", ".", 1))
            if key == "ops" and top:
                result[index]["top_op_us"].append([name.replace("::", ".", 1), float(span)])
        for start, end, owner, event in owners:
            index = call_of(start)
            if index < 0:
                continue
            if owner in ("triton", "extension"):
                result[index]["launch_us"] += float(end - start)
            for kernel in getattr(event, "kernels", None) or []:
                result[index]["kernels"].append(
                    [str(kernel.name)[:200], float(kernel.duration), owner])
        return result

    def candidate_ops(self, names) -> list[str]:
        """The names (any form) of ops registered after the candidate's import began."""
        return sorted({n for n in names if op_qualname(n) not in self.library_ops})
