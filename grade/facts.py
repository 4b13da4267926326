"""The worker-to-judge contract: what a candidate's worker reports, as typed, read-only facts.

The candidate's worker (``grade.worker``) sends its facts as one dict over the authenticated
result channel; ``Facts.from_result`` turns that dict, once, into the dataclasses below, and the
judge and its checks (``grade.checks``) read them and never write into them: what the judge
derives (a call's correctness, its share of the device time) lives in its own objects
(``grade.checks.context``).

Every value is kept as the worker sent it (a list stays a list, a number is not coerced): the
facts come from the candidate's process, and the checks themselves decide what a malformed
value means. A fact the worker did not send reads as its field's default; ``"key" in facts``
and ``facts.get(key, default)`` answer as a dict would (a fact sent as ``None`` is present).

Standard library only (an import contract in pyproject.toml keeps it so).
"""
from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar


@dataclass(frozen=True)
class FactGroup(Mapping):
    """One group of facts: named fields, read as attributes, or as a read-only mapping of the
    keys the worker actually sent (so code written against the worker's dict reads it too)."""

    present: frozenset = field(default=frozenset(), repr=False, compare=False)
    nested: ClassVar[dict[str, Any]] = {}  # field -> how its raw value is typed

    @classmethod
    def from_dict(cls, data: Any) -> Any:
        """The typed group of a worker's dict; any other value (None, a forged non-dict) is
        returned as it came, for the check that reads it to judge."""
        if isinstance(data, cls) or not isinstance(data, dict):
            return data
        names = {f.name for f in dataclasses.fields(cls)} - {"present"}
        known = {}
        for key, value in data.items():
            if key in names:
                typed = cls.nested.get(key)
                known[key] = typed(value) if typed else value
        return cls(present=frozenset(known), **known)

    def __getitem__(self, key: str) -> Any:
        if key not in self.present:
            _declared(type(self), key)
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self.present))

    def __len__(self) -> int:
        return len(self.present)

    def __contains__(self, key: object) -> bool:
        if key not in self.present:
            _declared(type(self), key)
        return key in self.present

    __hash__ = None  # type: ignore[assignment]


class UndeclaredFact(Exception):
    """A check read a fact its group does not declare: the worker's report of it never
    reaches the judge (``from_dict`` keeps declared fields only), so the check reads its
    default on every run."""


_WARNED: set = set()


def _declared(group: type, key: object) -> None:
    """A read of ``key`` from ``group`` that no worker's report can ever fill is a mistake of
    the grader's own code: an error where ``KERNELMILL_STRICT_FACTS`` is set (the tests), else
    one warning per name."""
    if key in {f.name for f in dataclasses.fields(group)}:
        return
    message = f"{group.__name__} declares no fact {key!r}: the worker's report of it is dropped"
    if os.environ.get("KERNELMILL_STRICT_FACTS", "") not in ("", "0", "false", "no"):
        raise UndeclaredFact(message)
    if (group, key) not in _WARNED:
        _WARNED.add((group, key))
        logging.getLogger("kernelmill").warning(message)


def _typed_list(cls):
    """Each dict of a list typed as ``cls``; anything else kept as sent."""
    def convert(value):
        return [cls.from_dict(item) for item in value] if isinstance(value, list) else value
    return convert


# ------------------------------------------------------------------ one checked forward call

@dataclass(frozen=True)
class CallFacts(FactGroup):
    """One checked forward call (``fresh``, ``refill``, ``repeat``, ``audit``) on one trial."""

    # the call and its answer
    kind: str = "?"
    trial: int = 0
    structure: Any = None  # the output's structure (tuple/list/tensor), compared to the reference
    outputs: list | None = None  # None: no tensor outputs (or ``oversized``)
    oversized: bool = False
    devices: list | None = None
    subclass: bool = False
    types: list = field(default_factory=list)
    alias: bool = False  # an output shares storage with an input
    inputs_after: list = field(default_factory=list)  # digests / sameness of the inputs after
    # threads
    threads: list = field(default_factory=list)  # Python threads alive after forward
    thread_starts: int = 0
    native_threads: list = field(default_factory=list)
    # the op trace and the profiler
    modes: list | bool = field(default_factory=list)  # torch modes active in forward
    ops: list = field(default_factory=list)  # profiler's op names
    candidate_ops: list | None = None  # ops the candidate registered (None: an older worker)
    op_roots: list = field(default_factory=list)  # each op's outermost op
    launch_ops: list = field(default_factory=list)
    traced_ops: list = field(default_factory=list)  # the dispatch trace's ops
    dispatch_state: Any = None  # a change of the dispatch-key state inside forward
    top_op_us: list = field(default_factory=list)
    flops: Any = None  # vendor-library FLOPs by torch's formulas
    thin_gemms: list = field(default_factory=list)
    output_by_copy: bool = False
    # launches and kernels
    launches: int = 0  # Triton launches
    ext_calls: int = 0  # extension calls
    launch_us: Any = None  # CPU: time inside the candidate's launches
    kernels: list = field(default_factory=list)  # [name, us, launcher] device records
    busy_us: Any = None  # GPU busy time of the call
    # host access
    input_reads: int = 0
    host_access: int = 0
    foreign_memory: Any = None
    foreign: Any = None


# ------------------------------------------------------------------ the timed calls

@dataclass(frozen=True)
class TimingFacts(FactGroup):
    """Counts over the timed calls (the worker's own timing loop)."""

    calls: int = 0
    launches: int = 0
    ext_calls: int = 0
    cpu_ms: Any = None


@dataclass(frozen=True)
class TimedFacts(FactGroup):
    """The last timed call's output and what the inputs looked like after timing."""

    outputs: list | None = None
    alias: bool = False
    inputs_after: list | None = None
    changed_while_timed: Any = None  # a list (empty: unchanged); anything else: no report
    threads: list = field(default_factory=list)
    foreign: Any = None


# ------------------------------------------------------------------ probes

@dataclass(frozen=True)
class GraphCheckFacts(FactGroup):
    """The timed CUDA graph replayed on a checked trial's inputs."""

    trial: int = 0
    outputs: list | None = None
    alias: bool = False
    calls_agree: Any = None  # ``measure.calls_disagree``'s report (a dict), judged as sent


@dataclass(frozen=True)
class GhostFacts(FactGroup):
    """A ghost call: forward with the candidate's Triton launches skipped."""

    trial: Any = None
    skipped: int = 0
    ext_calls: Any = None
    reuses_previous: Any = None  # tri-state: True / False / unknown
    previous_poisoned: Any = None
    outputs: list | None = None


@dataclass(frozen=True)
class UnseenFacts(FactGroup):
    """Single calls timed inside the window on inputs never shown before, and the calls on the
    timed inputs around them, by three clocks (wall, device, CPU)."""

    checks: Any = None  # [{hidden, outputs}] as sent (each judged as sent)
    method: Any = None
    calls: Any = None  # calls per graph replay
    device_unread: Any = None
    seen_ms: Any = None
    unseen_ms: Any = None
    after_ms: Any = None
    seen_device_us: Any = None
    unseen_device_us: Any = None
    unseen_calls_us: Any = None  # each unseen replay's captured calls' busy µs
    # ``measure.calls_disagree``'s report on the first unseen replay's captured calls (after
    # the window), or ``{"unread": why}``
    replay_agree: Any = None
    # the one-call graph's replay on the next hidden trial after the check's (a spare none of
    # its calls saw): {hidden, outputs, busy_us, ...} as sent (``worker._Run._single_check``)
    single: Any = None
    # (``single_warm``) the same on the hidden trial after it, its inputs read into the L2 cache
    # first, with ``warmed_bytes``
    single_warm: Any = None
    after_device_us: Any = None
    # a graph replay's kernels' busy time per call, the gaps between them left out
    seen_busy_ms: Any = None
    unseen_busy_ms: Any = None
    after_busy_ms: Any = None
    seen_cpu_ms: Any = None
    unseen_cpu_ms: Any = None
    after_cpu_ms: Any = None
    seen_wait_ms: Any = None  # on CPU: each call's wait for a core other processes held
    unseen_wait_ms: Any = None
    after_wait_ms: Any = None
    order: Any = None  # the kind of each timed call, in order (seen, even, unseen, after)
    even_calls_us: Any = None  # one hot replay's GPU busy time per captured call
    even_unread: Any = None
    even_overlap_us: Any = None
    even_launches_off: Any = None
    even_kernels_off: Any = None
    # wall ms of each unseen trial's steps (late part, load, observe): the profile's, not judged
    steps_ms: Any = None


# ------------------------------------------------------------------ the whole run

@dataclass(frozen=True)
class RunFacts(FactGroup):
    """Everything the candidate's worker reports of one run (its result channel's final value)."""

    nested: ClassVar[dict[str, Any]] = {
        "calls": _typed_list(CallFacts), "timing": TimingFacts.from_dict,
        "timed": TimedFacts.from_dict, "graph_check": GraphCheckFacts.from_dict,
        "ghost": GhostFacts.from_dict, "ghost_seen": GhostFacts.from_dict,
        "unseen": UnseenFacts.from_dict}

    calls: list = field(default_factory=list)
    # the reference's state in the candidate: how it was loaded ("by name", "by order", "seed
    # only", "none"), and each later state change ([state, loaded]; T-18)
    weights: Any = None
    state_loads: list = field(default_factory=list)
    # process and confinement
    confinement: Any = None  # ``validate.sandbox.STATE`` as applied
    children: int = 0  # child processes alive after forward
    refused_compiles: list = field(default_factory=list)
    # patching and tracing
    patched: list = field(default_factory=list)
    modes_after_import: Any = None
    modes_at_end: Any = None
    profile_hooks: Any = None
    witness: dict | None = None  # the op witness: {unavailable} or {error}
    python_ops: list = field(default_factory=list)  # candidate ops whose kernels are Python
    stray_ops: Any = None  # ops outside the candidate's calls
    timed_ops: list = field(default_factory=list)
    timed_candidate_ops: list | None = None
    # host memory and threads
    host_alias: int = 0
    host_view: int = 0
    threads_started: int = 0
    # the timed calls and the probes
    timing: TimingFacts | None = None
    timed: TimedFacts | None = None
    timed_checks: list = field(default_factory=list)  # [{call, trial, outputs}]
    graph_check: GraphCheckFacts | None = None
    unseen: UnseenFacts | None = None
    ghost: GhostFacts | None = None
    ghost_seen: GhostFacts | None = None


@dataclass(frozen=True)
class Facts:
    """A candidate run as the judge sees it: the channel and process facts the parent observed
    itself (``WorkerResult``), and the worker's own report (``run``, None when it failed)."""

    ok: bool
    run: RunFacts | None
    error: dict | None = None  # {"stage", "message"}
    stages: tuple = ()  # (stage, parent clock) marks
    tampered: bool = False  # a frame failed authentication
    leaked_processes: int = 0
    sandbox: int | None = None

    @classmethod
    def from_result(cls, result: Any) -> Facts:
        """The facts of one ``validate.harness.WorkerResult`` (built once per verdict)."""
        value = result.value if result.ok else None
        return cls(ok=bool(result.ok), run=RunFacts.from_dict(value) if value is not None
                   else None, error=result.error, stages=tuple(result.stages),
                   tampered=bool(result.tampered), leaked_processes=result.leaked_processes,
                   sandbox=result.sandbox)
