"""Worker side: what one forward asks of the device, for the launch-overhead check.

A forward that makes the host wait for the GPU (``.item()``, ``.cpu()``, ``.tolist()``,
``nonzero``, a boolean mask, ``torch.cuda.synchronize()``) cannot be timed as a CUDA graph, and
its host issue time includes the waits, so host time over GPU time says nothing about launches.
What does is the device's own record: ``device_work`` runs the forward once under the profiler
and returns how many kernels it launched and how long the device was busy with them (the union
of their intervals, by the device's clock). The judge (``checks.judge_launch``) compares that
with the forward's eager time: the rest is time the GPU waited on the host, for launches and
for syncs alike.

On CPU the same reading stands in for it (tests; the verdict is GPU-only): each top-level aten
op is one "launch", and its duration less the duration of an op that computes nothing (a
one-element add, measured in the same session: the host's cost of issuing any op) is the
device's work; the rest of the call's wall time is the host's own (Python, dispatch).

``syncs_in_loops`` reads the source for host syncs inside ``forward``'s loops: supporting
evidence in the check's detail, never the verdict.

Standard library and torch only (torch inside functions).
"""
from __future__ import annotations

import ast
import time
from collections.abc import Callable
from typing import Any

# aten ops that make the host wait for a CUDA device: a value read back to the host
# (``.item()``, ``.tolist()`` and ``float(t)`` run ``_local_scalar_dense``) or an output whose size
# depends on the data.
SYNCING_OPS = frozenset({
    "aten::_local_scalar_dense", "aten::nonzero", "aten::masked_select", "aten::_unique2",
    "aten::unique_dim", "aten::unique_consecutive", "aten::repeat_interleave",
    "aten::nonzero_static",
})
# CUDA runtime calls that block the host until the device has finished.
_BLOCKING_CALLS = frozenset({"cudaDeviceSynchronize", "cudaStreamSynchronize",
                             "cudaEventSynchronize", "cudaMemcpy"})
# Methods and functions that read a device value back to the host (the static reading).
_HOST_READS = frozenset({"item", "tolist", "cpu", "numpy", "synchronize", "nonzero"})


def _busy_ns(intervals: list[tuple[int, int]]) -> int:
    """The time covered by ``(start, end)`` intervals (overlaps counted once)."""
    total, reach = 0, None
    for start, end in sorted(intervals):
        if reach is None or start >= reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


def _top_level(records: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The ``(start, end)`` records not nested in another one (one thread's ops)."""
    top: list[tuple[int, int]] = []
    for start, end in sorted(records, key=lambda r: (r[0], -r[1])):
        if top and start < top[-1][1]:
            continue
        top.append((start, end))
    return top


# The user range around the CPU reading's idle ops (their cost is the floor of every op's).
_IDLE = "kernelmill.idle_op"
_IDLE_OPS = 20


def read_device_work(events, cuda: bool) -> dict:
    """Kernels, busy time and syncs from a finished profiler session's raw records
    (``profile.profiler.kineto_results.events()``); see the module docstring for CPU."""
    import torch

    cpu_type = torch._C._autograd.DeviceType.CPU
    device: list[tuple[int, int]] = []
    ops: dict[int, list[tuple[int, int]]] = {}
    syncing = blocking = 0
    idle: tuple[int, int] | None = None
    events = list(events)
    for event in events:
        if event.is_user_annotation() and event.name() == _IDLE:
            idle = (event.start_ns(), event.start_ns() + event.duration_ns())
    idle_ops: list[int] = []
    for event in events:
        name = event.name()
        if event.is_user_annotation():
            continue
        span = (event.start_ns(), event.start_ns() + event.duration_ns())
        if idle is not None and idle[0] <= span[0] <= idle[1]:
            if name == "aten::add_":
                idle_ops.append(event.duration_ns())
            continue
        if event.device_type() != cpu_type:
            device.append(span)
            continue
        if name in SYNCING_OPS:
            syncing += 1
        elif name in _BLOCKING_CALLS:
            blocking += 1
        if not cuda and name.startswith("aten::"):
            ops.setdefault(event.start_thread_id(), []).append(span)
    floor = 0
    if not cuda:
        device = [r for records in ops.values() for r in _top_level(records)]
        floor = sorted(idle_ops)[len(idle_ops) // 2] if idle_ops else 0
        device = [(start, max(start, end - floor)) for start, end in device]
    return {"kernels": len(device), "busy_ms": _busy_ns(device) / 1e6,
            "syncing_ops": syncing, "blocking_calls": blocking,
            "op_floor_ms": floor / 1e6 if not cuda else None}


# Profiled calls on CPU, the least disturbed kept: another process preempting the host
# stretches an op's recorded time as much as the call's (no device clock to read instead).
CPU_CALLS = 5
# Plain (unprofiled) calls on CUDA whose least wall time is ``eager_wall_ms``.
PLAIN_CALLS = 2


def device_work(forward: Callable[..., Any], args: Callable[[], list], device: str) -> dict:
    """One call ``forward(*args())`` (after one warm call; the arguments made outside the
    profiled range) under the profiler: ``kernels`` (device records: kernels, copies, memsets;
    on CPU top-level aten ops), ``busy_ms`` (the device's time on them, overlaps once; on CPU
    less ``op_floor_ms`` each, an idle op's time), ``syncing_ops`` (aten ops that wait for a
    CUDA device), ``blocking_calls`` (CUDA runtime calls that block the host) and ``wall_ms``
    (the call's wall time under the profiler, to its last kernel: inflated by the profiler's
    own cost, so the judge takes the lesser of it and the timed eager time). On CPU the
    call of ``CPU_CALLS`` with the least wall time. On CUDA also ``eager_wall_ms``: the least
    wall time of ``PLAIN_CALLS`` calls outside the profiler, each from an idle GPU to its last
    kernel (a forward timed as a CUDA graph has no eager time of its own to set against the
    kernels' busy time), and ``eager_issue_ms``, that call's time until ``forward`` returned
    to the host (the rest is work the GPU still had queued)."""
    import torch

    from .measure import is_cuda, synchronize

    cuda = is_cuda(device)
    with torch.no_grad():
        forward(*args())
        synchronize(device)
        plain = []  # (wall ms, issue ms) of each plain call
        for _ in range(PLAIN_CALLS if cuda else 0):
            values = args()
            synchronize(device)
            begin = time.perf_counter()
            forward(*values)
            issued = time.perf_counter()
            synchronize(device)
            plain.append(((time.perf_counter() - begin) * 1e3, (issued - begin) * 1e3))
            del values
        best = None
        for _ in range(1 if cuda else CPU_CALLS):
            work = _profiled_call(forward, args(), device, cuda)
            if best is None or work["wall_ms"] < best["wall_ms"]:
                best = work
    wall, issue = min(plain) if plain else (None, None)
    return {**best, "eager_wall_ms": wall, "eager_issue_ms": issue}


def _profiled_call(forward: Callable[..., Any], values: list, device: str, cuda: bool) -> dict:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from .measure import synchronize

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    synchronize(device)
    with profile(activities=activities) as prof:
        if not cuda:
            with torch.profiler.record_function(_IDLE):
                one = torch.zeros(1)
                for _ in range(_IDLE_OPS):
                    one.add_(1)
        begin = time.perf_counter()
        forward(*values)
        synchronize(device)
        wall_ms = (time.perf_counter() - begin) * 1e3
    return {**read_device_work(prof.profiler.kineto_results.events(), cuda), "wall_ms": wall_ms}


class _LoopReads(ast.NodeVisitor):
    """Host reads (``_HOST_READS`` calls) inside loops of one function, as ``line N: .name()``."""

    def __init__(self):
        self.depth = 0
        self.found: list[str] = []

    def _repeated(self, once: list, repeated: list) -> None:
        for node in once:
            self.visit(node)
        self.depth += 1
        for node in repeated:
            self.visit(node)
        self.depth -= 1

    def visit_For(self, node: ast.For) -> None:  # the iterable is evaluated once
        self._repeated([node.target, node.iter], [*node.body, *node.orelse])

    def visit_While(self, node: ast.While) -> None:
        self._repeated([], [node.test, *node.body, *node.orelse])

    def _comprehension(self, node) -> None:  # the first iterable is evaluated once
        first, *rest = node.generators
        parts = [getattr(node, "elt", None), getattr(node, "key", None),
                 getattr(node, "value", None), *first.ifs, *rest]
        self._repeated([first.iter], [p for p in parts if p is not None])

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _comprehension

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if self.depth and isinstance(func, ast.Attribute) and func.attr in _HOST_READS:
            self.found.append(f"line {node.lineno}: .{func.attr}()")
        elif self.depth and isinstance(func, ast.Name) and func.id in ("float", "int", "bool") \
                and len(node.args) == 1:
            self.found.append(f"line {node.lineno}: {func.id}()")
        self.generic_visit(node)


def syncs_in_loops(source: str) -> list[str]:
    """Calls inside a loop of any class's ``forward`` that read a device value back to the
    host (``.item()``, ``.tolist()``, ``.cpu()``, ``.numpy()``, ``torch.cuda.synchronize()``,
    ``float(t)``): each one a host sync per step on CUDA. Empty when the source does not parse."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    reads = _LoopReads()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "forward":
                    reads.visit(item)
    return reads.found
