"""Probes that ask the candidate's run questions a checked call cannot (``_Probes``, mixed into
``call._Run``).

The unseen-input check (``unseen``): inside the timing window, calls on inputs seen in every
timed call against calls on inputs never seen before, timed alike; a forward that remembers
inputs is fast only on the first. The ghost call (``ghost``): forward with the candidate's
Triton launches skipped, over memory filled with NaN first; a right answer then was not computed
by the kernels. The timing graph's calls (``_even_calls_us``): each captured call must launch
and keep the GPU busy alike.
"""
from __future__ import annotations

import ctypes
from contextlib import contextmanager
from math import prod as _prod

import torch
from kernelmill.validate import measure as M
from kernelmill.validate import timer as T
from kernelmill.validate.late_read import late_payload
from kernelmill.validate.measure import _numpy, flatten_outputs
from kernelmill.validate.measure import synchronize as sync
from kernelmill.validate.window_worker import reads_slow

from .guards.dispatch import dispatch_changed
from .guards.originals import (
    _empty,
    _full,
    _gc_disable,
    _gc_enable,
    _gc_isenabled,
    _no_grad,
    _perf_counter,
    _Tensor,
    _tensor_copy,
    _tensor_detach,
    _tensor_fill,
    _tensor_set,
    _tensor_storage,
    _type,
)
from .inputs import to_cpu, to_device
from .observers.counts import _audit_event, _observed
from .observers.optrace import active_modes

REPLAY_ALIGN = 64  # bytes: each output's place in the kept replay's block starts on such a bound


def _aligned(t) -> int:
    nbytes = t.numel() * t.element_size()
    return -(-nbytes // REPLAY_ALIGN) * REPLAY_ALIGN


def _into_block(items: list[list], block, device: str = "cuda") -> list[list] | None:
    """``items`` (each call's flattened outputs) copied into ``block`` (host memory set aside
    and touched before the window: no page is faulted in now), each ``device`` tensor into its
    own aligned place, and read back as views of it in their dtypes and shapes. None where the
    block is missing or too small, or an output is not a ``device`` tensor of a dtype the
    bytes view as (copied one by one instead)."""
    if block is None:
        return None
    tensors = [t for call in items for t in call if _type(t) is _Tensor]
    if any(t.device.type != device for t in tensors) or \
            sum(_aligned(t) for t in tensors) > block.numel():
        return None
    views, offset = [], 0
    for t in tensors:
        nbytes = t.numel() * t.element_size()
        try:
            view = block[offset:offset + nbytes].view(t.dtype).view(t.shape)
        except RuntimeError:
            return None
        _tensor_copy(view, _tensor_detach(t))
        views.append(view)
        offset += _aligned(t)
    sync(device)
    kept = iter(views)
    return [[next(kept) if _type(t) is _Tensor else t for t in call] for call in items]


def _uneven_launches(captured: list) -> dict:
    """``{"even_launches_off": {call, found, first}}`` when the captured calls (``captured``:
    the Triton launches and extension calls of each, in order: the timing graph's and the
    graphs that size it) did not all launch alike; ``{}`` when they did. The timing graph's
    kernels are split into its calls by count, which a forward could shift by launching more,
    smaller pieces in some calls and none in another (GRAPH_COPY.md); its launches at capture
    show it."""
    if len(captured) < 2:
        return {}
    first = captured[0]
    for call, found in enumerate(captured):
        if found != first:
            return {"even_launches_off": {"call": call, "found": list(found),
                                          "first": list(first)}}
    return {}


def _other_kernels(runs: list | None, checked: list | None) -> dict:
    """``{"even_kernels_off": {call, found, wanted}}`` for the first run of ``runs`` (each a
    sorted list of kernel names: one captured call's, ``Witness.span_run_names``) whose names
    are not the ``checked`` call's (its ``[name, us, owner]`` kernels); ``{}`` when every run's
    are, or either is unknown. The replay's kernels are split into calls by count: a forward
    whose captured calls launch different kernels (pieces of the work in some, none in others)
    would move the split's boundaries off its calls'."""
    if not runs or checked is None:
        return {}
    wanted = sorted(str(k[0])[:200] for k in checked if isinstance(k, (list, tuple)) and k)
    for call, found in enumerate(runs):
        if found != wanted:
            return {"even_kernels_off": {"call": call, "found": found[:8],
                                         "wanted": wanted[:8]}}
    return {}


class _Probes:
    """The probes of a candidate's run: methods of ``call._Run`` (its buffers, ``load``,
    ``invoke`` and ``observe``), defined here."""

    def unseen(self, timer: T.Timer) -> int:
        """Inside the timing window: calls timed alike, first ``SEEN_FIRST`` on trial 0's
        inputs (seen in every timed call; each such call follows an untimed one on the same
        inputs), then each hidden trial's (never seen before), each followed by
        ``AFTER_CALLS`` on trial 0's again ("after"), all loaded into the same buffers. A
        forward that remembers inputs it has seen (an answer cache keyed by their content, on
        the host or on the device) is fast only on the first kind; a hidden trial's output is
        also sent to the parent to compare with the reference's.

        With a captured graph each timed call is a replay of the timing graph itself (a graph
        captured for this check alone could be told apart from it, and behave); its first
        call is the one on the inputs just loaded. Otherwise each is one forward (``Timer.once``).
        Each is also a witness ``span``: on CUDA its first call's kernels, by the device's own
        clock (CUPTI), free of the launch's and the synchronize's fixed cost, which hide a cache
        that saves a few µs. The witness, paused for graph replays, runs meanwhile."""
        if not self.hidden:
            return 0
        seen_ms, unseen_ms, checks, order = [], [], [], []
        first, self.pristine = getattr(self, "pristine", None), None
        first = first or self._on_device(self.trials[0])  # (made before the window)
        whole = timer.graph is not None
        calls = timer.calls_per_sample if whole else 1
        paused = not self.witness.running
        if paused:
            self.witness.resume()

        def timed_on(trial: dict, kind: str | None = None, flush: bool = True):
            began = _perf_counter()
            # the one-call graph (``Timer.once``), not the timing graph
            one = kind in SINGLE_KINDS
            self.load(trial["inputs"], single=one, warm=kind == "single_warm")
            if kind in ("unseen", *SINGLE_KINDS):
                steps["load"].append(round((_perf_counter() - began) * 1e3, 2))
            if kind is not None:
                order.append(kind)
            timer.last_cpu_ms = timer.last_wait_ms = None
            ms, out = timer.once(lambda: self.invoke()[0],
                                 self.witness.span if kind is not None else None,
                                 whole and not one, flush)
            if kind in cpu_ms and timer.last_cpu_ms is not None:  # on CPU
                cpu_ms[kind].append(timer.last_cpu_ms / calls)
                if timer.last_wait_ms is not None:
                    wait_ms[kind].append(timer.last_wait_ms / calls)
            return ms / (1 if one else calls), out

        def repeated(kind: str) -> float:  # on the inputs of the call before, as when timed
            timed_on(first)
            return timed_on(first, kind)[0]

        after_ms: list[float] = []
        cpu_ms: dict[str, list[float]] = {"seen": [], "unseen": [], "after": []}
        # and each one's wait for a core that other processes held (``Timer.last_wait_ms``)
        wait_ms: dict[str, list[float]] = {"seen": [], "unseen": [], "after": []}
        # where each unseen trial's wall time went (the profile's, never judged): its part
        # asked for and mapped, loaded into the inputs, its output looked at
        steps: dict[str, list[float]] = {"late": [], "load": [], "observe": [], "seen": [],
                                         "even": [], "keep": [], "after": []}

        def stamp(step: str, began: float) -> None:
            steps[step].append(round((_perf_counter() - began) * 1e3, 2))
        # The check is the window's last command (``window_rounds._timed_rounds``): the witness, once
        # resumed, stays on, so ending its session (CUPTI's teardown) is not exclusive GPU time.
        done, singles = False, {}
        # The collector is held off through the whole check, so no finaliser of the candidate's
        # (a cycle's ``__del__``, a weakref callback, ``gc.callbacks``) runs between a new
        # input's load and its call's span, nor between the span and the copies of its answer:
        # work launched there on the loaded inputs, or into the call's output, would be nobody's
        # call (a collection held off comes due at the first allocation after it is let go)
        collecting = _gc_isenabled()
        _gc_disable()
        try:
            # The baseline comes before any unseen input: a forward that changes its ways once
            # it has seen one (a cache that turns honest) cannot raise it. Calls on the timed
            # inputs after each unseen one show such a change.
            began = _perf_counter()
            for _ in range(SEEN_FIRST):
                seen_ms.append(repeated("seen"))
            # read slow against the window's own rounds (``Timer.scored_ms``: other work on the
            # GPU for a moment, a context made beside the window): read once more, still
            # before any unseen input. The judge takes the fastest of them, against the scored
            # calls and as the bound the unseen calls are held to, so a forward slow only in
            # the check stays slow in both readings, and one fast here answers to its unseen
            # calls (an honest square GEMM read 7.38, 5.88 and 5.99 ms here against 3.20
            # scored, 3.74 on its unseen inputs, H100)
            if reads_slow([timer.scored_ms] if timer.scored_ms else [], seen_ms, [],
                          self.retry_ratio):
                for _ in range(SEEN_FIRST):
                    seen_ms.append(repeated("seen"))
            stamp("seen", began)
            if whole and calls > 1:
                # one replay right after another on the same inputs, unflushed, as the scored
                # ones run: its calls' kernels, each call's apart (``_unseen_device_us``)
                began = _perf_counter()
                timed_on(first, "even", flush=False)
                stamp("even", began)
            # the spares' trigger reads the clock the scored calls are timed by; where that is
            # not the device's (no graph: events around each launch, the host's clock), the
            # judge's device- and CPU-time bounds go unread by it: more trials always
            required = self.hidden_required if whole else self.hidden_required_ungraphed
            # a graph of several calls: the last trial is kept for the one-call check, the last
            # two with ``single_warm`` where two go past the required ones
            # (``checks.probes.check_trials``), never a spare
            kept = _kept_checks(self.hidden, required, getattr(self, "single_warm", False)) \
                if whole and calls > 1 else 0
            for index in range(self.hidden - kept):
                if index >= required and not reads_slow(
                        seen_ms, unseen_ms, after_ms, self.retry_ratio):
                    break  # the spares are for a check whose calls read slow
                # asked for now: it was nowhere in this process before (``late_payload``)
                if self._mode_would_see_new_inputs():
                    break
                began = _perf_counter()
                trial = late_payload(index)
                steps["late"].append(round((_perf_counter() - began) * 1e3, 2))
                if trial is None:
                    break
                ms, out = timed_on(trial, "unseen")
                unseen_ms.append(ms)
                if whole and calls > 1 and not index:
                    began = _perf_counter()
                    self._keep_replay(timer)
                    stamp("keep", began)
                began = _perf_counter()
                blocks = getattr(self, "unseen_blocks", None) or []
                checks.append({"hidden": index, **self.observe(
                    out, self.buffers, inputs_after=False, ship=False,
                    into=blocks[index] if index < len(blocks) else None)})
                steps["observe"].append(round((_perf_counter() - began) * 1e3, 2))
                began = _perf_counter()
                after_ms.append(repeated("after"))
                for _ in range(AFTER_CALLS - 1):  # on the same inputs, right after
                    after_ms.append(timed_on(first, "after")[0])
                stamp("after", began)
            for number, kind in enumerate(SINGLE_KINDS[:kept]):
                singles[kind] = self._single_check(timer, self.hidden - kept + number, timed_on,
                                                   first, kind)
                if singles[kind] is None:
                    break  # (the parent finds the checks missing)
            done = True
        finally:
            if collecting:
                _gc_enable()
            if paused and not done:
                self.witness.pause()
        self.unseen_facts = {"seen_ms": seen_ms, "unseen_ms": unseen_ms, "after_ms": after_ms,
                             "checks": checks, "method": timer.method, "order": order,
                             "calls": calls, "steps_ms": steps, "required": required,
                             "gated": bool(getattr(timer, "gated", False))}
        self.unseen_facts.update({kind: check for kind, check in singles.items()
                                  if check is not None})
        if cpu_ms["unseen"]:
            self.unseen_facts.update({f"{k}_cpu_ms": v for k, v in cpu_ms.items()})
            if all(len(wait_ms[k]) == len(cpu_ms[k]) for k in cpu_ms):
                self.unseen_facts.update({f"{k}_wait_ms": v for k, v in wait_ms.items()})
        return len(unseen_ms)

    def _mode_would_see_new_inputs(self) -> bool:
        """Whether a torch function or dispatch mode is pushed before a new trial is asked
        for: it would see each op on its inputs (their reading into tensors, their load's copy)
        outside every call, and could answer from them. The trial is then not asked for, and
        the timed calls are reported as changed (an honest forward leaves no mode pushed)."""
        if not active_modes():
            return False
        self.changed_while_timed.append("a torch function or dispatch mode was active when the "
                                        "unseen check's new inputs were to come in")
        return True

    def _single_check(self, timer: T.Timer, index: int, timed_on, first: dict,
                      kind: str = "single") -> dict | None:
        """After the unseen check, on the hidden trial ``index`` kept for it (never a spare,
        no call has seen it): one replay of the one-call graph (``Timer.once``, captured like
        the timing graph), its output sent to the parent to compare. Its kernels' busy time is one call's
        whole work, made alone on the GPU and checked: a call of the timing graph may do a
        slice of it (the forward can write into every call's output, and every output is whole
        once the replay ends), so its replays stand for no call
        (``device_work.scored_device_work``).
        The forward can tell this graph apart: it either computes the answer here, or is wrong.
        Then one more untimed call on trial 0's inputs (``first``), which the parent checks after
        the window as the calls left them. None where no one-call graph was kept (the parent
        then finds the check missing). ``kind`` "single_warm": the trial's inputs are read into
        the L2 cache before the call (``load``), as a scored call's block left its copy there;
        the judge holds only the scored calls to its time."""
        if getattr(timer, "_single", None) is None:
            return None
        if self._mode_would_see_new_inputs():
            return None
        began = _perf_counter()
        trial = late_payload(index)
        if trial is None:
            return None
        # warm: its inputs just loaded (for the graph's placement alone: ``load``), no flush,
        # as a scored call finds the caches (``device_work.scored_device_work`` holds the scored
        # calls to it)
        ms, out = timed_on(trial, kind, flush=False)
        blocks = getattr(self, "single_blocks", None) or {}
        observed = self.observe(out, self.buffers, inputs_after=False, ship=False,
                                into=blocks.get(kind))
        # the timed inputs back, as a call on them leaves them (what the parent checks after the
        # window: a forward that changes its inputs changes them here too)
        timed_on(first)
        return {"hidden": index, "ms": ms, "wall_ms": round((_perf_counter() - began) * 1e3, 2),
                **({"warmed_bytes": warmed} if kind == "single_warm" and
                   (warmed := getattr(self, "warmed_bytes", None)) is not None else {}),
                **observed}

    def before_window(self, timer: T.Timer) -> None:
        """Once the timer is prepared, before the worker says it is ready for the window:
        the host memory the first unseen replay is copied into (``reserve_replay``), and trial
        0's inputs where the unseen check loads them from (``_on_device``). Made inside the
        window, that copy from the shown file's pages took 20-50 ms of every window at
        KernelBench's sizes (H200)."""
        self.reserve_replay(timer)
        self.pristine = self._on_device(self.trials[0]) if self.hidden else None
        self.reserve_unseen_outputs(timer)

    def reserve_unseen_outputs(self, timer: T.Timer) -> None:
        """Before the window: host memory each unseen trial that is always called (not the
        spares) copies its outputs into inside it (``observe(into=...)``), one touched block per
        output the checked calls gave (``last_shapes``), up to ``HELD_UNSEEN_BYTES`` in all.
        Into new host memory, a 256 MiB output's copy took 84-92 ms of the window, most of it
        page faults (H200 host; a 256 MB copy on a 2-core host: 127-149 ms into new memory,
        25 ms into touched). On CUDA only (elsewhere the outputs are on the host already)."""
        self.unseen_blocks, self.single_blocks = [], {}
        shapes = getattr(self, "last_shapes", None) or []
        if not self.hidden or not shapes or not self.device.startswith("cuda"):
            return
        sizes = [int(_prod(shape)) * dtype.itemsize for shape, dtype in shapes]
        required = self.hidden_required if timer.graph is not None else \
            self.hidden_required_ungraphed
        trials = min(required, HELD_UNSEEN_BYTES // max(1, sum(sizes)))
        self.unseen_blocks = [[_touched(size) for size in sizes] for _ in range(trials)]
        # and the one-call graph's checks' (a graph of several calls: ``_single_check``), as
        # many as fit
        kept = SINGLE_KINDS[:_kept_checks(self.hidden, required,
                                          getattr(self, "single_warm", False))]
        if timer.graph is not None and getattr(timer, "calls_per_sample", 1) > 1:
            room = HELD_UNSEEN_BYTES // max(1, sum(sizes)) - trials
            self.single_blocks = {kind: [_touched(size) for size in sizes]
                                  for kind in kept[:max(0, room)]}

    def reserve_replay(self, timer: T.Timer) -> None:
        """Before the window: host memory the first unseen replay's outputs are copied into
        (``_keep_replay``), as many calls' outputs as the timing graph could hold
        (``HELD_OUTPUT_BYTES`` at most: the window's warm-up may capture it again with more
        calls), touched now so that the copies inside the window fault no page in. Copied
        tensor by tensor into new memory they took 126-164 ms of the window for graphs of many
        µs calls (H200). Pageable, as those copies were: no kernel is handed it. Not for a
        graph that can hold one call only."""
        self.replay_block = None
        if timer.graph is None or not torch.cuda.is_available():
            return
        per_call = sum(_aligned(t) for t in flatten_outputs(timer.outputs[-1])[1]
                       if _type(t) is _Tensor) if timer.outputs else 0
        calls = min(timer.max_calls, T.HELD_OUTPUT_BYTES // max(1, per_call))
        if per_call and calls >= 2:
            self.replay_block = _touched(per_call * calls)

    def _keep_replay(self, timer: T.Timer) -> None:
        """Every captured call's output of the first unseen replay, copied to the host at once
        (inside the window: the graph's held outputs, ``HELD_OUTPUT_BYTES`` at most; before any
        later replay, whose kernels could write over copies left on the device), for
        ``replay_agreement`` after it: each call on inputs never shown before must have
        computed the whole answer. Into the memory ``reserve_replay`` set aside where it fits
        (else each to new host memory). Not kept where the copies' own ops have kernels other
        than those before the candidate's import (``guards.dispatch``)."""
        changed = dispatch_changed(self.dispatch) if self.dispatch else []
        if changed:
            self.unseen_replay = f"copies not trusted ({changed[0]})"
            return
        items = [flatten_outputs(output)[1] for output in timer.outputs]
        try:
            self.unseen_replay = _into_block(items, getattr(self, "replay_block", None)) or \
                [[to_cpu(t) if _type(t) is _Tensor else t for t in call] for call in items]
        except RuntimeError as exc:  # not read, not trusted
            self.unseen_replay = f"{type(exc).__name__}: {exc}"[:200]

    def replay_agreement(self, tolerance: tuple[float, float]) -> None:
        """After the window: whether each captured call of the first unseen replay agrees with
        the last, element by element within ``tolerance`` (``measure.calls_disagree``, as the
        graph check on a checked trial), into the unseen facts (``replay_agree``). A forward
        that computes every call in full on inputs it has checked and slices elsewhere reads
        even there, and is told apart here."""
        kept, self.unseen_replay = getattr(self, "unseen_replay", None), None
        if kept is None or not isinstance(getattr(self, "unseen_facts", None), dict):
            return
        self.unseen_facts["replay_agree"] = {"unread": kept} if isinstance(kept, str) else \
            M.calls_disagree(kept, tolerance)

    def _on_device(self, trial: dict) -> dict:
        """``trial`` with its input tensors copied to the device once, when they are small
        enough (``PRISTINE_BYTES``): the unseen check loads them ten times, inside the window,
        and a load from the host moved 128 MB over PCIe each time. Larger ones, up to
        ``PINNED_PRISTINE_BYTES`` (as the host allocator rounds them), copied into page-locked
        host memory instead: the copy engine reads it at full speed, where each load of
        KernelBench's 512 MiB cross-entropy input from the shown file's pageable pages took
        65-90 ms of the window (H200); the small tensors beside such inputs (under
        ``SMALL_PRISTINE_BYTES`` each: its 256 KiB of targets) go to the device, up to
        ``PRISTINE_BYTES`` in all, and count nothing against the page-locked bound. Where
        either copy cannot be made, the trial as given."""
        tensors = [v for v in trial["inputs"] if _type(v) is _Tensor]
        size = sum(v.numel() * v.element_size() for v in tensors)
        if not self.device.startswith("cuda") or not tensors:
            return trial
        try:
            if size <= PRISTINE_BYTES:
                return {**trial, "inputs": to_device(trial["inputs"], self.device)}
            small = lambda v: v.numel() * v.element_size() < SMALL_PRISTINE_BYTES
            # (the host allocator holds each block at the next power of two)
            if sum(_next_power_of_two(v.numel() * v.element_size())
                   for v in tensors if not small(v)) <= PINNED_PRISTINE_BYTES and \
                    sum(v.numel() * v.element_size() for v in tensors if small(v)) <= \
                    PRISTINE_BYTES:
                return {**trial, "inputs": [
                    v if _type(v) is not _Tensor else to_device([v], self.device)[0]
                    if small(v) else _pinned(v) for v in trial["inputs"]]}
        except RuntimeError:  # no room on the device or for page-locked memory: as given
            pass
        return trial

    def ghost(self, trial_index: int) -> dict:
        """Forward once more on a trial's inputs with the candidate's Triton launches skipped.
        The memory the allocator hands out next is first filled with NaN (``GHOST_POISON``
        blocks of each last output's size, freed just before: forward's own intermediates of
        that size take some of them, and every cached block that still holds an earlier answer
        is taken and overwritten), so a skipped kernel leaves garbage behind. If the answer is
        still right, the kernels did not compute it."""
        trial = self.trials[trial_index]
        previous = self._previous
        poisoned = _poison_outputs(previous)
        self.load_trial(trial)
        poison = [_full(shape, float("nan") if dtype.is_floating_point else -1,
                             dtype=dtype, device=self.device)
                  for shape, dtype in self.last_shapes for _ in range(GHOST_POISON)]
        del poison
        before = _observed()
        _audit_event("kernelmill.ghost", 1)
        try:
            self.ghost_ranges.add(self.witness.calls)
            with _fresh_host_memory_filled(not self.device.startswith("cuda")):
                out, _ = self.invoke()
            sync(self.device)
        finally:
            _audit_event("kernelmill.ghost", -1)
        after = _observed()
        earlier = M._spans(previous) if previous is not None else []
        reused = any(lo < b and a < hi for lo, hi in M._spans(out) for a, b in earlier)
        return {"trial": trial_index, "skipped": after["ghosted"] - before["ghosted"],
                "ext_calls": after["ext_calls"] - before["ext_calls"],
                # the answer sits where the call before left its own (a kept output buffer)
                "reuses_previous": reused,
                # and that memory was filled with NaN first: a kept buffer holds no answer
                "previous_poisoned": poisoned,
                **self.observe(out, self.buffers, inputs_after=False)}

    def _unseen_device_us(self, unseen: dict, calls_facts: list | None = None) -> None:
        """The unseen check's device times (``seen_device_us``, ``unseen_device_us``), or why
        they could not be read (``device_unread``): the judge does not pass a check it could
        not make."""
        calls = unseen.get("calls", 1)
        per_call = self.witness.span_calls_us(_range_calls(unseen))
        spans = None if per_call is None else [None if busy is None else busy[0]
                                               for busy in per_call]
        counts = getattr(self.witness, "span_counts", None)
        if spans is None:
            unseen["device_unread"] = "no kernel records"
        elif len(spans) != len(unseen["order"]):
            unseen["device_unread"] = f"{len(spans)} timed ranges for {len(unseen['order'])} calls"
        elif not all(counts):
            unseen["device_unread"] = f"no kernel in a timed range (kernels per range {counts})"
        elif None in spans:
            unseen["device_unread"] = (f"kernels per range {counts} do not split into {calls} "
                                       "calls each")
        else:
            for kind in ("seen", "unseen", "after"):
                unseen[f"{kind}_device_us"] = [us for k, us in zip(unseen["order"], spans)
                                               if k == kind]
            # every captured call of each unseen replay (whether its calls read alike)
            unseen["unseen_calls_us"] = [list(busy) for k, busy in zip(unseen["order"],
                                                                        per_call)
                                         if k == "unseen"]
            for kind in SINGLE_KINDS:
                if isinstance(unseen.get(kind), dict) and kind in unseen["order"]:
                    unseen[kind]["busy_us"] = spans[unseen["order"].index(kind)]
            # each range's busy time per call (all its kernels, by the device's clock): a whole
            # timing graph's replay as the GPU ran it, free of the host's latency around it and
            # of the gaps a busy host leaves between its kernels while the witness is on
            busy = getattr(self.witness, "span_busy_us", None) or []
            if len(busy) == len(unseen["order"]) and None not in busy:
                for kind in ("seen", "unseen", "after"):
                    unseen[f"{kind}_busy_ms"] = [us / calls / 1e3 for k, us in
                                                 zip(unseen["order"], busy) if k == kind]
        calls_facts = calls_facts or []
        repeat = [c for c in calls_facts if c.get("kind") == "repeat"] or calls_facts[-1:]
        self._even_calls_us(unseen, calls, repeat[0].get("kernels") if repeat else None)

    def _even_calls_us(self, unseen: dict, calls: int, checked: list | None = None) -> None:
        """The hot replay of the timing graph (``unseen``'s "even" call): the busy time of each
        captured call's kernels (``even_calls_us``), and µs in which one call's kernels ran
        beside another's (``even_overlap_us``); else why not (``even_unread``). With
        ``checked`` (a checked call's ``[name, us, owner]`` kernels): the first call of the
        replay whose kernels are not those by name (``even_kernels_off``)."""
        if "even" not in unseen["order"]:
            return
        index = unseen["order"].index("even")
        per_call = self.witness.span_calls_us(_range_calls(unseen))
        counts = getattr(self.witness, "span_counts", None) or []
        if per_call is None or len(per_call) != len(unseen["order"]):
            unseen["even_unread"] = "no kernel records for each timed range"
        elif per_call[index] is None:
            unseen["even_unread"] = (f"{counts[index]} kernels in one replay do not split into "
                                     f"{calls} calls")
        else:
            unseen["even_calls_us"] = per_call[index]
            unseen["even_overlap_us"] = self.witness.span_overlap_us[index]
            runs = (getattr(self.witness, "span_run_names", None) or [None] * (index + 1))[index]
            unseen.update(_other_kernels(runs, checked))
        unseen.update(_uneven_launches(getattr(self, "captured", [])))


SEEN_FIRST = 3  # calls on the timed inputs that open the unseen check: its baseline
# The one-call graph's checks, in the order made (``checks.device_work.SINGLE_KEYS``): on inputs
# just loaded, then (``single_warm``) on inputs read into the L2 cache first
SINGLE_KINDS = ("single", "single_warm")
# Timed calls on the timed inputs after each unseen one. A forward that switched its ways slows
# them all; one call alone can read slow by chance: an honest 4 µs fp16 GEMM's one call after
# read 5.06 µs of kernels against 4.16 before (bound 5.03; 1 of 72 grades in groups, H200).
AFTER_CALLS = 2
PRISTINE_BYTES = 256 << 20  # the timed inputs kept on the device for the unseen check, up to
PINNED_PRISTINE_BYTES = 512 << 20  # and in page-locked host memory, up to (as rounded)
# ... of the inputs this size or larger: smaller ones go to the device beside them (KernelBench's
# cross-entropy inputs, 512 MiB of logits and 256 KiB of targets, were over the bound counted
# together, and each of the check's nine loads of them from pageable pages took 64 ms of the
# window: 0.6-0.9 s of its 1.3 s windows, H100)
SMALL_PRISTINE_BYTES = 16 << 20
HELD_UNSEEN_BYTES = 1 << 30  # host memory touched before the window for unseen outputs, at most


def _kept_checks(hidden: int, required: int, warm: bool) -> int:
    """The one-call checks a graph of several calls gets (``checks.probes.kept_checks``): one
    where a hidden trial goes past the ``required`` ones, two with ``warm`` where two do."""
    return max(0, min(1 + bool(warm), hidden - required))


def _range_calls(unseen: dict) -> list[int]:
    """The calls each timed range of the unseen check holds, in order: a replay of the timing
    graph ``calls``, the one-call graph's check (single) one."""
    calls = unseen.get("calls", 1)
    return [1 if kind in SINGLE_KINDS else calls for kind in unseen["order"]]


def _touched(nbytes: int):
    """``nbytes`` of new host memory, every page faulted in now (filled through NumPy: no
    PyTorch op for the witness to count), for copies made later inside the window."""
    block = _empty(nbytes, dtype=torch.uint8)
    _numpy(block).fill(0)
    return block


def _next_power_of_two(nbytes: int) -> int:
    return 1 << max(0, nbytes - 1).bit_length()


def _pinned(value):
    """A page-locked host copy of ``value`` (a device's copy engine reads it directly)."""
    held = _empty(tuple(value.shape), dtype=value.dtype, pin_memory=True)
    _tensor_copy(held, value)
    return held


def _poison_outputs(output) -> bool:
    """Fill the memory behind each tensor of the call before's result with all-one bytes (NaN
    in every floating-point type, -1 in the integer ones), in place, before a ghost call: an
    answer kept there (an output buffer the forward returns again, or a cache that hands back
    the tensor it gave last) is gone, so a right answer with the launches skipped was computed
    by something other than the kernels. Whether every such tensor was filled."""
    if output is None:
        return False
    _kind, items = flatten_outputs(output)
    tensors = [item for item in items if _type(item) is _Tensor]
    try:
        with _no_grad():
            for tensor in tensors:
                flat = _tensor_set(_empty(0, dtype=torch.uint8, device=tensor.device),
                                   _tensor_storage(tensor))
                _tensor_fill(flat, 255)
    except Exception:  # noqa: BLE001 — a tensor without plain storage: not poisoned
        return False
    return bool(tensors)


def _libc_mallopt():
    """glibc's ``mallopt``, bound at import; None where the C library has none (not glibc)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return None
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt


_MALLOPT = _libc_mallopt()
M_PERTURB = -6  # glibc: fill each block malloc hands out with ~value's low byte, freed ones with it
PERTURB_ALL_ONES = 0x100  # handed-out bytes 0xFF (NaN in every float type, -1 in the integers)


@contextmanager
def _fresh_host_memory_filled(on: bool = True):
    """Within: every block the C allocator hands out above its per-thread cache's sizes (1 KiB)
    comes filled with all-one bytes, whatever it held (glibc's ``M_PERTURB``); a smaller one
    that cache hands back has its first bytes overwritten by the cache's own links, so it holds
    no earlier answer whole either. A CPU tensor's
    memory comes from malloc, which keeps no order a handful of poisoned blocks can rely on: a
    freed block that still holds an earlier call's answer can be merged, split and handed back
    to the ghost call's ``empty_like``, so an honest kernel whose launch was skipped would look
    like it gave the answer anyway. Nothing where off or the library has no ``mallopt``."""
    if not on or _MALLOPT is None or _MALLOPT(M_PERTURB, PERTURB_ALL_ONES) != 1:
        yield
        return
    try:
        yield
    finally:
        _MALLOPT(M_PERTURB, 0)


GHOST_POISON = 4  # poisoned blocks per output before the ghost call (one was not enough on
# CPU: a conv + Triton ReLU's conv output took it, and its output got a block holding the answer)
