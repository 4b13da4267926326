"""The call protocol (``_Run``): every forward of the candidate, checked or timed, goes through
``_Run.invoke`` and is observed the same way.

The call's inputs live in persistent buffers at several places in memory, their version counters
are reset, the RNG starts from the grade's seed, gradients are off by the C calls bound at
import, the op trace and the witness range are open, and the forward starts at the same stack
depth with its last output's reference count levelled. Nothing the candidate can read tells a
checked call from a timed one. A checked call (``call``) returns raw facts for the parent; a
timed call (``timed``) is what the timer calls, and a secret share of them check another trial.
The probes (``probes._Probes``) are methods of the same run.
"""
from __future__ import annotations

import random
import sys
from typing import Any

import torch
from kernelmill.grade.witness import Witness, dispatch_state, op_qualname
from kernelmill.validate import measure as M
from kernelmill.validate import timer as T
from kernelmill.validate.measure import synchronize as sync

from .guards.originals import (
    _enumerate_threads,
    _getrefcount,
    _is_capturing,
    _is_grad_enabled,
    _isinstance,
    _no_torch_function,
    _set_grad_enabled,
    _set_versions,
    _Tensor,
    _tensor_copy,
    _type,
)
from .inputs import into_blocks, keep, look, look_pieces, to_cpu, to_device
from .observers.counts import _audit_event, _check_dispatch_state, _observed
from .observers.host_memory import _foreign
from .observers.optrace import _OpTrace, _python_only, _spans, active_modes
from .observers.threads import _task_name, _tasks
from .probes import _Probes
from .seeding import _manual_seed, forward_seed

HELD_REFS = 64

# Every forward starts this many Python frames deep, whichever of the grader's paths called it
# (a checked call, the timer's rounds, its clock check, the unseen-input check, the ghost): a
# pure-Python recursion that counts the frames left before ``RecursionError`` would otherwise
# read each kind of call apart and do half the work in scored calls only. The deepest path to
# ``_Run.invoke`` is about 40 frames.
CALL_DEPTH = 128


def _stack_depth(_getframe=sys._getframe) -> int:
    """Frames on the stack from the caller's down to the thread's first."""
    frame, depth = _getframe(1), 0
    while frame is not None:
        depth += 1
        frame = frame.f_back
    return depth


def _at_depth(left: int, fn, args: tuple):
    """``fn(*args)`` called ``left`` frames further down than this call (no deeper when
    ``left`` is not positive)."""
    if left > 0:
        return _at_depth(left - 1, fn, args)
    return fn(*args)


def _held_alike(value) -> list:
    """References to ``value`` (the last call's output) and to each item of it (a tuple or list
    of tensors) that bring each one's reference count to the same number during every call,
    whoever else holds it: the timer keeps its last output, an unseen-input check a local, a
    checked call neither. A forward that reads its last output's count (through a raw address,
    no tensor method at all) would otherwise tell scored calls from checked ones."""
    if value is None:
        return []
    held = []
    for item in ([value, *value] if _type(value) in (tuple, list) else [value]):
        held.extend([item] * max(0, HELD_REFS - _getrefcount(item)))
    return held


class _Run(_Probes):
    """One candidate model on one device, every forward call observed the same way.

    Every call, checked or timed, goes through ``invoke``: the call's inputs live in the same
    persistent buffers (copied in when they change), the buffers' version counters are reset,
    the RNG is seeded from the call's trial, and the op trace and the witness range are active.
    Nothing the candidate can read (pointers, versions, RNG state, dispatch-key state, the
    profiler flag) tells a checked call from a timed one. Some timed calls, picked by a secret
    (``timed_check_seed``), get another trial's inputs and their output is sent to the parent.
    The probes (``probes._Probes``) are its methods too."""

    # The probes' methods bound in this class's own namespace as well: the patch snapshot lists a
    # class's own members, so one of them rebound on ``_Run`` is a patch wherever it is defined.
    unseen, _on_device, ghost = _Probes.unseen, _Probes._on_device, _Probes.ghost
    before_window, reserve_replay = _Probes.before_window, _Probes.reserve_replay
    reserve_unseen_outputs = _Probes.reserve_unseen_outputs
    _unseen_device_us, _even_calls_us = _Probes._unseen_device_us, _Probes._even_calls_us

    def __init__(self, model, device: str, base_threads: set, base_tasks: set,
                 max_bytes: int | None = None, *, trials: list | None = None,
                 witness: Witness | None = None, check_seed: int | None = None,
                 hidden: int = 0, init_seed: int = 0, states: dict | None = None,
                 base_state: int = 0, slots=None, hidden_required: int | None = None,
                 hidden_required_ungraphed: int | None = None,
                 retry_ratio: float | None = None, placing: str = T.PLACING,
                 single_warm: bool = False):
        self.model, self.device, self.max_bytes = model, device, max_bytes
        # a second one-call check, its inputs read into the L2 cache before its call (``load``,
        # ``probes._single_check``)
        self.single_warm, self.warmed_bytes, self.warm_pairs = single_warm, None, []
        # the model states the trials run under (T-18: ``state.perturbed_state``), copied into
        # the candidate's own tensors (``slots``) when a trial names another than the last
        self.states, self.slots, self.state = states or {}, slots, base_state
        self.state_loads: list = []  # (state, loaded) per change, for the parent
        self.forward_seed = forward_seed(init_seed)
        self.first_call = True
        self.base_threads, self.base_tasks = base_threads, base_tasks
        self.trials = trials or []
        self.witness = witness or Witness()
        self.buffers = to_device(self.trials[0]["inputs"], device) if self.trials else []
        # the timed calls' inputs at several places in memory, in turn (``T.placed_copies``,
        # ``T.PlacementTurns``); every load fills them all, so any call sees the same inputs
        # wherever they sit
        self.placements = T.placed_copies(self.buffers, device, placing=placing)
        self.turns = T.PlacementTurns(len(self.placements), placing)
        if single_warm:  # its reads made now, outside any window (``timer.warm_plan``)
            self.warm_pairs, self.planned_bytes = T.warm_plan(self.placements[0], device)
        self.timed_calls = 0
        self.captured: list[tuple[int, int]] = []  # (launches, extension calls) per captured call
        self.timed_checks: list[dict] = []
        self.changed_while_timed: list[str] = []  # ``check_timed_inputs``
        self.ghost_ranges: set[int] = set()  # the witness ranges of the ghost calls
        self.last_shapes: list[tuple] = []
        self._secret = random.Random(check_seed) if check_seed is not None else None
        self._timed_pool = self._same_state_trials()  # the trials a timed call may check
        self.hidden = hidden  # unseen-input trials, each asked of the parent at its call
        # of which the first ``hidden_required`` always, the rest (spares) only while those
        # read over ``retry_ratio`` times the timed inputs' calls (``window_worker.reads_slow``)
        self.hidden_required = hidden if hidden_required is None else \
            max(0, min(hidden, int(hidden_required)))
        # ... where the timer replays no graph (``Policy.unseen_required``)
        self.hidden_required_ungraphed = self.hidden_required \
            if hidden_required_ungraphed is None else \
            max(self.hidden_required, min(hidden, int(hidden_required_ungraphed)))
        self.retry_ratio = float(retry_ratio) if retry_ratio else None
        self.unseen_facts: dict | None = None
        self.unseen_replay = None  # the first unseen replay's calls' outputs (``_keep_replay``)
        self.dispatch: dict = {}  # the aten ops' kernels before the import (``guards.dispatch``)
        self._shipped: dict[tuple, list] = {}  # host copies of outputs, by dtype, shape, strides
        self._previous = None  # the last call's output (``invoke``)
        self._held: list = []  # references that level its count (``_held_alike``)

    def check_timed_inputs(self) -> None:
        """After each round and loop of the timing window: the inputs at every placement must
        still be trial 0's as sent. Scored calls are the only ones no load precedes, so a mark
        a forward writes into its own inputs survives only between them, and tells them apart
        (a forward can halve its work where its mark is still there, and stop marking before
        the check after timing). Any such write is seen here."""
        if self.changed_while_timed or not self.trials:
            return
        if active_modes():  # left by a scored call: it could answer this check's own ops
            self.changed_while_timed.append("a torch function or dispatch mode was active "
                                            "between timed calls, where the inputs are checked")
            return
        for place, buffers in enumerate(self.placements):
            for index, (value, sent) in enumerate(zip(buffers, self.trials[0]["inputs"])):
                if _type(value) is _Tensor and _unchanged_fact(value, sent).get("same") is False:
                    self.changed_while_timed.append(f"input {index} (placement {place}) changed "
                                                    "between timed calls")
                    return

    def sometimes_check_timed_inputs(self) -> None:
        """Between two scored calls, after a secret share of them (``SAMPLE_CHECK_SHARE``):
        ``check_timed_inputs``. A mark set and cleared within a round is gone by its end, and
        the calls of a round can be counted (a forward can mark its inputs after a round's
        first call and clear them in its last); it is there after some call, and
        which calls are looked after is not known to the forward. Outside the sample's time."""
        if self._secret is not None and self._secret.random() < SAMPLE_CHECK_SHARE:
            self.check_timed_inputs()

    def load(self, values: list, single: bool = False, warm: bool = False) -> None:
        """Put a trial's inputs into the persistent buffers (same storage, same pointers), at
        every placement: one from ``values``, the others from it on the device (a host copy per
        placement cost three more passes over the host's memory). ``single``: for the one-call
        graph's check, made warm, as a scored call finds the caches: with "blocks" placing only
        the placement it reads (the first), so the writes of the others do not evict the
        parameters a scored call finds cached; otherwise the first written last. ``warm``
        (the warm one-call check, with ``single_warm``): that placement's inputs are then read
        into the L2 cache by the reads planned with the run (``timer.warm_cache``), as a scored
        call's block left its copy there."""
        if single:
            self._load_single(values, warm)
            return
        self._load_placements(values, self.placements)

    def _load_single(self, values: list, warm: bool = False) -> None:
        if self.turns.placing == "blocks":
            self._load_into(self.placements[0], values)
        else:
            self._load_placements(values, self.placements[1:] + self.placements[:1])
        if warm and getattr(self, "warm_pairs", None):
            self.warmed_bytes = self.planned_bytes if T.warm_cache(self.warm_pairs) else 0

    def _load_placements(self, values: list, order: list) -> None:
        first = order[0]
        self._load_into(first, values)
        for buffers in order[1:]:
            self._load_into(buffers, [
                own if _type(own) is _Tensor and _type(value) is _Tensor and
                own.shape == value.shape and own.dtype == value.dtype else value
                for own, value in zip(first, values)])

    def _load_into(self, buffers: list, values: list) -> None:
        for index, value in enumerate(values):
            buffer = buffers[index] if index < len(buffers) else None
            if _type(value) is not _Tensor:
                buffers[index] = value
            elif _type(buffer) is _Tensor and buffer.shape == value.shape and \
                    buffer.dtype == value.dtype:
                _tensor_copy(buffer, value)
            else:
                buffers[index] = to_device([value], self.device)[0]

    def use_state(self, index: int) -> None:
        """Load model state ``index`` into the candidate, unless it holds it already. Never
        inside the timing window (its calls share trial 0's state)."""
        if index == self.state or self.slots is None or index not in self.states:
            return
        loaded = self.slots.load(self.states[index])
        self.state_loads.append([index, loaded])
        self.state = index

    def load_trial(self, trial: dict) -> None:
        """A trial's state, then its inputs (``load``)."""
        self.use_state(int(trial.get("state") or 0))
        self.load(trial["inputs"])

    def _same_state_trials(self) -> list[int]:
        """Trials other than 0 that share its state: those a timed call may secretly check."""
        first = int(self.trials[0].get("state") or 0) if self.trials else 0
        return [i for i in range(1, len(self.trials))
                if int(self.trials[i].get("state") or 0) == first]

    def _next_placement(self) -> None:
        """The next timed call's inputs: the next placement's buffers."""
        if len(self.placements) > 1:
            self.buffers = self.placements[self.turns.next()]

    def invoke(self, capturing: bool | None = None):
        """One candidate forward on the buffers, instrumented identically for every call
        (``capturing``: whether a CUDA graph capture is on, when the caller asked already).
        Every call starts from the same RNG state (``forward_seed``: the grade's, not the
        trial's, which would name the inputs: a key for an answer cache read through
        ``torch.initial_seed()``), and every placement's inputs from version 1 (the copies not
        in use would otherwise tell a call that a load came before it)."""
        tensors = tuple(b for buffers in self.placements for b in buffers if _type(b) is _Tensor)
        if tensors:
            _set_versions(tensors, (1,) * len(tensors))
        if capturing is None:
            capturing = _capturing(self.device)
        if not capturing:
            _manual_seed(self.forward_seed)
        # Gradients off by the C calls bound at import, around the ranges: ``torch.no_grad``'s
        # exit looks ``torch.set_grad_enabled`` up, after the ranges closed (a submission can
        # rebind it for one call, to a function that computes the answer there and puts itself
        # back). The witness's range is the outermost and is opened and closed by direct calls:
        # every piece of Python on the way in and out (the op trace's mode, its context
        # manager, a name looked up in torch or the standard library, which a submission can
        # make run its own code) runs inside it, where its ops are the call's (not PyTorch run
        # from a ``contextlib`` exit after the range closed).
        self._held = []  # the last call's levelling released first: it is counted anew
        self._held = _held_alike(self._previous)
        watched = _spans([b for b in self.buffers if _type(b) is _Tensor and
                          b.is_floating_point() and b.numel() > 1])
        grad = _is_grad_enabled()
        _set_grad_enabled(False)
        _audit_event("kernelmill.call", 1, "")
        opened = self.witness.open_call()
        try:
            tracer = _OpTrace(watched)
            with tracer:
                _audit_event("kernelmill.call", 0, dispatch_state())
                out = _at_depth(CALL_DEPTH - _stack_depth(), self.model, self.buffers)
                _check_dispatch_state()
        finally:
            self.witness.close_call(opened)
            _audit_event("kernelmill.call", -1, "")
            _set_grad_enabled(grad)
        # Held until the next call has returned, whatever kind of call this was: a forward that
        # learns from its last output's finalizer whether the timer still holds it could be fast
        # only in scored calls. (Released here, after the range: a finalizer's
        # ops are outside every call.)
        self._previous = out
        return out, tracer

    def timed(self):
        """A timed call (``validate.timer`` calls this as its ``fn``), on the next
        placement's buffers."""
        self.timed_calls += 1
        self._next_placement()
        check = None
        pool = self._timed_pool
        if self._secret is not None and pool and \
                self._secret.random() * self.timed_calls < 1.0 and not _capturing(self.device):
            check = pool[self._secret.randrange(len(pool))]  # a reservoir of one call
        if check is None:
            capturing = _capturing(self.device)
            if not capturing:
                return self.invoke(False)[0]
            before = _observed()
            out = self.invoke(True)[0]
            after = _observed()
            # each captured call's Triton launches and extension calls, every capture's (the
            # graphs that size a sample, the timing graph, a spare): all must launch alike
            # (``probes._uneven_launches``)
            self.captured.append((after["launches"] - before["launches"],
                                  after["ext_calls"] - before["ext_calls"]))
            del self.captured[:-CAPTURED_KEPT]
            return out
        self.load(self.trials[check]["inputs"])
        out, _ = self.invoke()
        sync(self.device)
        self.timed_checks = [{"trial": check, "call": self.timed_calls,
                              **self.observe(out, self.buffers, inputs_after=False)}]
        self.load(self.trials[0]["inputs"])
        return out

    def call(self, trial_index: int) -> dict:
        """A checked call on trial ``trial_index``: raw facts for the parent."""
        trial = self.trials[trial_index]
        self.load_trial(trial)
        inputs = self.buffers
        before = _observed()
        modes_before = active_modes()
        record: dict[str, Any] = {"range": self.witness.calls}
        out, tracer = self.invoke()
        sync(self.device)
        after = _observed()
        for name in ("launches", "ext_calls", "thread_starts", "dispatch_state", "host_access",
                     "foreign_memory"):
            record[name] = after[name] - before[name]
        record["modes"] = max(modes_before, active_modes())
        record["ops"] = tracer.ops
        record["input_reads"] = tracer.input_reads
        record["flops"], record["thin_gemms"] = tracer.flops, tracer.thin_gemms[:8]
        items = list(out) if _type(out) in (tuple, list) else [out]
        produced = _spans([t for t in items if _type(t) is _Tensor])
        overlaps = lambda spans: any(lo < b and a < hi for lo, hi in produced  # noqa: E731
                                     for a, b in spans)
        # The answer was copied into place by PyTorch and no custom kernel touched it.
        record["output_by_copy"] = overlaps(tracer.copy_spans) and not overlaps(after.get("kernel_args", ()))
        record["threads"] = sorted(t.name for t in _enumerate_threads()
                                   if t.ident not in self.base_threads and t.is_alive())
        tasks = _tasks()
        if self.first_call:
            # Runtimes start some OS threads lazily on first use (CUDA module loading, OpenMP at
            # a new size): report those, then judge only threads that appear in later calls.
            record["native_threads_first_call"] = sorted(_task_name(t)
                                                         for t in tasks - self.base_tasks)
            self.base_tasks = self.base_tasks | tasks
            self.first_call = False
            record["native_threads"] = []
        else:
            record["native_threads"] = sorted(_task_name(t) for t in tasks - self.base_tasks)
        record.update(self.observe(out, inputs, sent=trial["inputs"]))
        return record

    def witnessed(self, facts: dict) -> None:
        """After the last call: put the witness's op lists into the call records."""
        self.witness.stop()
        per_call = self.witness.per_call()
        checked = {call["range"] for call in facts["calls"]} | self.ghost_ranges
        if per_call is not None:
            for call in facts["calls"]:
                if call["range"] < len(per_call):
                    entry = per_call[call["range"]]
                    call["traced_ops"] = call["ops"]
                    for key in ("ops", "op_roots", "launch_ops", "top_op_us", "launch_us",
                                "kernels", "busy_us"):
                        call[key] = entry[key]
            timed = {(op, root) for index, entry in enumerate(per_call) if index not in checked
                     for op, root in [*zip(entry["ops"], entry["op_roots"]),
                                      *((op, op) for op in entry["launch_ops"])]}
            facts["timed_ops"] = sorted([op, root] for op, root in timed)
            facts["timed_candidate_ops"] = self.witness.candidate_ops([op for op, _ in timed])
            kernels: dict[str, float] = {}
            for index, entry in enumerate(per_call):
                if index not in checked:
                    for _name, us, owner in entry["kernels"]:
                        kernels[owner] = kernels.get(owner, 0.0) + us
            facts["timed_kernel_us"] = kernels  # by owner: triton, extension, or an op name
            facts["stray_ops"] = dict(self.witness.stray)
        for call in facts["calls"]:
            call["candidate_ops"] = self.witness.candidate_ops(
                [*call["ops"], *call.get("launch_ops", []), *call.get("traced_ops", [])])
        facts["python_ops"] = sorted({op_qualname(op) for call in facts["calls"]
                                      for op in call["candidate_ops"] if _python_only(op)})
        unseen = self.unseen_facts
        if unseen and self.device.startswith("cuda") and not self.witness.unavailable:
            self._unseen_device_us(unseen, facts["calls"])
        facts["witness"] = {"calls": self.witness.calls, "error": self.witness.error,
                            "unavailable": self.witness.unavailable,
                            "cost": dict(self.witness.cost)}  # the profile's alone
        facts["timed_checks"] = self.timed_checks
        facts["timed_check_calls"] = self.timed_calls

    def ship(self, tensor: torch.Tensor) -> torch.Tensor:
        """The host copy of an output, for the parent. One bit for bit like an output already
        shipped is that same tensor object, and ``torch.save`` writes a shared storage once: a
        deterministic forward's repeat, refill, audit and timed calls on one trial cross the
        pipe once (a 4096² fp16 matmul: 32 MB each). Found by comparing the bytes with those
        shipped of its dtype, shape and strides (one per trial, mostly)."""
        host = look(tensor)
        shipped = self._shipped.setdefault((str(host.dtype), tuple(host.shape), host.stride()),
                                           [])
        for earlier in shipped:
            if M.same_bits(earlier, host):
                return earlier
        host = keep(host)
        shipped.append(host)
        return host

    def observe(self, out, inputs: list, inputs_after: bool = True, ship: bool = True,
                sent: list | None = None, into: list | None = None) -> dict:
        """The call's outputs as the parent judges them (copied to the host), and, where the
        parent checks them (checked and timed calls), the inputs as forward left them. Without
        ``ship`` the host copies are sent as they are (no digest to find a copy shipped
        already: an unseen input's output is like no other, and inside a timing window a
        SHA-256 of 64 MB costs 40 ms or more), copied through the pinned staging buffer
        (``look``) there and then: a copy left on the device for after the window could be
        rewritten by the candidate's kernels, which run again before the window ends."""
        if _type(out) in (tuple, list):
            structure, items = f"{_type(out).__name__}:{len(out)}", list(out)
        else:
            structure, items = ("tensor" if _isinstance(out, torch.Tensor)
                                else _type(out).__name__), [out]
        facts: dict[str, Any] = {"structure": structure, "types": [], "outputs": None,
                                 "subclass": False}
        outputs, alias = [], False
        input_spans = _spans(inputs)
        for item in items:
            kind = _type(item)
            facts["types"].append(f"{kind.__module__}.{kind.__qualname__}")
            if kind is not _Tensor:
                facts["subclass"] = _isinstance(item, torch.Tensor)
                outputs = None
                break  # never touch a subclass or foreign object: its methods are candidate code
            if self.max_bytes and item.numel() * item.element_size() > self.max_bytes:
                facts["oversized"] = True
                outputs = None
                break  # not worth shipping: it cannot be the right answer
            for low, high in _spans([item]):
                alias = alias or any(low < b and a < high for a, b in input_spans)
            facts["foreign"] = facts.get("foreign", False) or _foreign(item)
            outputs.append(item)
        else:
            facts["devices"] = [t.device.type for t in outputs]
            # without ``ship``: into ``into``'s blocks where they fit (memory touched before
            # the window), else new host memory
            facts["outputs"] = [self.ship(t) for t in outputs] if ship else \
                into_blocks(outputs, into) or [keep(look(t)) for t in outputs]
            self.last_shapes = [(tuple(t.shape), t.dtype) for t in outputs]
        facts["alias"] = alias
        if inputs_after:  # the parent checks only that they are unchanged
            facts["inputs_after"] = [_unchanged_fact(v, s) for v, s in
                                     zip(inputs, sent if sent is not None else [None] * len(inputs))]
        return facts


def _unchanged_fact(value, sent) -> Any:
    """What the parent checks of an input after forward: for a tensor, whether its bytes are
    still those the parent sent (``sent``: the trial's host tensor; without it, a SHA-256 the
    parent computes too), else the value itself."""
    if _type(value) is not _Tensor:
        return value
    if _type(sent) is _Tensor:
        # no torch-function mode answers the copies (one a scored call left pushed)
        with _no_torch_function():
            if sent.device.type != "cpu":
                sent = to_cpu(sent)
            # its bytes on the host piece by piece through the staging buffer
            # (``look_pieces``), each compared with the sent bytes there: a 6.4 GB input is
            # not copied whole again
            same = value.dtype == sent.dtype and value.shape == sent.shape and \
                M.same_bytes_in_pieces(look_pieces(value), sent)
        return {"same": same, "dtype": str(value.dtype), "shape": list(value.shape)}
    return M.tensor_digest(look(value))  # digested here, then dropped


SAMPLE_CHECK_SHARE = 0.25  # scored calls after which the inputs are compared (one per sample)
CAPTURED_KEPT = 4096  # captured calls' launch counts kept (``_Run.captured``; graphs <= 1024)


def _capturing(device: str) -> bool:
    """Inside a CUDA graph capture (the RNG cannot be reseeded there)."""
    return device.startswith("cuda") and bool(_is_capturing())
