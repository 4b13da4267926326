"""The probes: checks on calls the worker made beyond the checked ones, whose answers or times
tell whether the candidate's kernels did the work where it was timed: ghost calls (launches
skipped), calls on inputs first shown while timed (unseen), the timed CUDA graph replayed and
split by call, and the device work of every call against the scored time (its bounds in
``device_work``).

The helpers keep a ``hack(code, detail)`` callback (unit tests drive them with raw dicts); the
registered checks at the end adapt them to findings."""
from __future__ import annotations

import math
import statistics
from collections.abc import Mapping

import torch

from ..compare import compare, near_miss, scaled_atol
from ..policy import Policy
from kernelmill.validate.window_worker import reads_slow

from .device_work import SINGLE_KEYS, device_readings_agree, gpu_drift, scored_device_work
from .registry import HackCode, Layer, collect, register

# A check replay's first call stands for it against the scored time (an honest replay's later
# calls read up to 1.9x its first, H200), but never below its mean call over this factor, which
# an empty first call cannot lower
CHECK_REPLAY_SPREAD = 1.5


def ghost_check(ghost, key: str, trials: list, policy: Policy, record, checks: dict, hack,
                 all_correct: bool) -> None:
    """A ghost call (``worker._Run.ghost``: forward with the candidate's Triton launches
    skipped, the next allocations poisoned) whose answer is still right: the kernels did not
    compute it. ``ghost_seen`` runs on the inputs of the call before it, where a forward that
    serves the answer it gave last from memory of its own would hit (an answer returned where
    the call before returned its own is not judged there: a kept output buffer); a ghost call
    that launched nothing at all (no Triton launch to skip, no extension call) and was right is
    judged the same way."""
    if not isinstance(ghost, Mapping) or not all_correct:
        return
    trial_index = ghost.get("trial")
    if not isinstance(trial_index, int) or not 0 <= trial_index < len(trials):
        return
    skipped, ext_calls = ghost.get("skipped") or 0, ghost.get("ext_calls")
    if not skipped and (ext_calls != 0 or not policy.require_custom_kernel):
        return  # an extension's kernels are not skipped (or library compute): nothing to learn
    if key == "ghost_seen" and ghost.get("reuses_previous") is not False and \
            ghost.get("previous_poisoned") is not True:
        # an output buffer the forward keeps still holds the answer to the same inputs: an
        # honest forward that returns one is right here with its launches skipped
        return
    trial = trials[trial_index]
    dtype = next((str(t.dtype) for t in trial["outputs"] if isinstance(t, torch.Tensor)),
                 "torch.float32")
    ok, _why = compare(trial["outputs"], ghost.get("outputs"), *policy.tolerance(dtype, record),
                       count=False)
    what = f"{skipped} launch(es) skipped" if skipped else "no launch at all"
    checks[key] = {"passed": not ok, "detail": f"{what} (trial {trial_index})"}
    if ok:
        hack("ghost_kernels", f"with {what if skipped else 'no kernel launched'}, forward still "
             f"gave the right answer on trial {trial_index}'s inputs: the kernels did not "
             "compute it")


def agreement_slack(outputs, atol: float) -> float:
    """The absolute gap under which two calls' outputs of a trial are the same answer to the
    judge: the least ``compare.scaled_atol`` of the trial's float outputs (the reference's),
    where ``compare`` widens the dtype's floor by an output's spread (a noisy record), as
    atomics or split-K move an honest kernel's elements from one call to the next; ``atol``
    itself elsewhere. The worker counts the elements off with the tolerance as sent."""
    tensors = [t for t in outputs or () if isinstance(t, torch.Tensor) and t.is_floating_point()
               and t.numel()]
    return min((scaled_atol(t, atol) for t in tensors), default=atol)


def graph_calls_agree(agree, hack, replayed: str = "the graph check",
                      slack: float = 0.0) -> None:
    """Every call the timing graph holds wrote an output of its own; replayed on new inputs,
    each must agree with the last call's within the problem's tolerance, element by element
    (``measure.calls_disagree`` counts the elements off in the worker, with the tolerance the
    grader sent: one scale for a whole tensor would let a call be loose where values are
    small). Each captured call may compute a few slices into one kept output which the calls
    together complete (T-13): the last output is right, each call did part of the work. A
    report that is missing or unreadable fails. ``slack``: ``agreement_slack``."""
    if not isinstance(agree, dict) or not isinstance(agree.get("calls"), int):
        hack("timing_behaviour", f"{replayed} did not say whether the timed graph's calls "
             "agreed")
        return
    if not calls_agreed(agree, slack):
        gap, scale, off = agree.get("max_abs"), agree.get("scale"), agree.get("off")
        hack("timing_behaviour", f"call {agree['call']!r} of the timed graph's {agree['calls']} "
             f"(from 0), replayed on new inputs ({replayed}), has {off!r} elements off the "
             f"last's (by up to {gap!r}, outputs up to {scale!r}): the timed calls did not each "
             "compute the answer")


def calls_agreed(agree, slack: float = 0.0) -> bool:
    """Whether ``measure.calls_disagree``'s report says every call agreed with the last within
    the tolerance (bit for bit, or no element off), or within ``slack`` of it everywhere
    (``agreement_slack``): the largest gap of any float output of any call (``gap_all``, not
    the reported call's alone: one call's noise must not hide another's missing slice) is one
    the judge would not tell apart, and no output of another kind differs at all."""
    if not isinstance(agree, dict) or not isinstance(agree.get("calls"), int):
        return False
    if agree.get("call") is None:
        return True
    gap, scale, off = agree.get("max_abs"), agree.get("scale"), agree.get("off")
    if not all(_number(v) for v in (gap, scale, agree["call"], off)):
        return False
    if off == 0:
        return True
    gap_all, exact_off = agree.get("gap_all"), agree.get("exact_off")
    return _number(gap_all) and exact_off == 0 and type(exact_off) is int and \
        math.isfinite(gap_all) and gap_all <= slack


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def unseen_shape(unseen: dict | None, hidden: list[dict], window: dict, hack,
                 required: int | None = None, ratio: float | None = None,
                 warm: bool = False) -> None:
    """A timed window with unseen trials ends with the unseen-input check on the first
    ``required`` of them (default: every one) and on as many of the rest (its spares, asked
    for where those read slow: ``window_worker.reads_slow``) as it went on to, in order, then
    (a graph of several calls) the one-call check on the trials kept for it (``check_trials``:
    the last, or with ``warm`` the last two, the warm check's last), each
    part written by the parent once, when the worker asked (``window.late_released``): a
    report that leaves a trial out, or covers other trials than the parent gave, did not make
    it. (The facts come from the candidate's process; the count of parts comes from the
    parent's own record.) A spare left out helps no forward: every bound takes the fastest
    call on new inputs. Each spare timed must be one the calls before it called for (the same
    ``reads_slow`` at ``ratio``, of the calls the report gives)."""
    if not hidden:
        return
    required = len(hidden) if required is None else max(0, min(required, len(hidden)))
    made = sorted(c.get("hidden") for c in ((unseen or {}).get("checks") or [])
                  if isinstance(c, dict) and isinstance(c.get("hidden"), int))
    # a timing graph of several calls: the last trials are the one-call graph's checks', made
    # always, after the check and its spares (``worker._Run._single_check``)
    after = check_trials(unseen, len(hidden), required, warm)
    pool = after[0] if after else len(hidden)
    wanted = list(range(max(required, len(made)) if len(made) <= pool else required))
    # each check on its kept trial, and no other check reported
    kept = dict(zip(SINGLE_KEYS, after))
    singles = all(single_trial(unseen, len(hidden), key) == kept.get(key) for key in SINGLE_KEYS)
    released = window.get("late_released")
    if made != wanted or not singles or \
            (released is not None and list(released) != wanted + after):
        hack("timing_behaviour", f"the unseen-input check covered trials {made[:8]} of "
             f"{len(hidden)} (the parent wrote parts {list(released or [])[:8]}, in that "
             "order): it was not made as the window asked")
        return
    facts = unseen or {}
    calls = [facts.get(f"{kind}_ms") if isinstance(facts.get(f"{kind}_ms"), list) else []
             for kind in ("seen", "unseen", "after")]
    seen, new, after = ([float(v) for v in values if isinstance(v, (int, float))]
                        for values in calls)
    per = len(after) // len(new) if new else 0
    for spare in range(required, len(made)):
        if not reads_slow(seen, new[:spare], after[:per * spare], ratio):
            hack("timing_behaviour", f"the unseen-input check timed spare trial {spare}, which "
                 "the calls before it did not call for: it was not made as the window asked")
            return



def check_trials(unseen: dict | None, hidden: int, required: int,
                 warm: bool = False) -> list[int]:
    """The hidden trials kept for the one-call graph's checks, in the order they are made: the
    last of ``hidden`` (with ``warm``, the last two, the warm check's the last, where two go
    past the ``required`` ones: else the first check alone), where the timer replayed a graph
    of several calls and the trials go past the ``required`` ones; else none (no check is
    made)."""
    facts = unseen or {}
    calls = facts.get("calls")
    several = facts.get("method") == "cuda_graph" and type(calls) is int and calls > 1
    kept = kept_checks(hidden, required, warm) if several else 0
    return list(range(hidden - kept, hidden))


def kept_checks(hidden: int, required: int, warm: bool) -> int:
    """How many one-call checks a graph of several calls gets (``check_trials``): one where a
    hidden trial goes past the ``required`` ones, two with ``warm`` where two do."""
    return max(0, min(1 + bool(warm), hidden - required))


def single_trial(unseen: dict | None, hidden: int, key: str = "single") -> int | None:
    """The hidden trial a one-call graph's check ran on (``UnseenFacts.single``, or ``key``);
    -1 for a report that names none of the ``hidden`` trials; None where it was not made."""
    single = (unseen or {}).get(key)
    if single is None:
        return None
    index = single.get("hidden") if isinstance(single, dict) else None
    return index if type(index) is int and 0 <= index < hidden else -1


def _unseen_answers(unseen: dict, hidden: list[dict], policy: Policy, record, hack,
                    checks: dict, wrong) -> bool:
    """Every unseen-input call's answer against its hidden trial's, the one-call graph's check
    too (``single``); False at the first that is not right (a hack, or ``wrong`` for an
    answer only just past the tolerance)."""
    single = [unseen[key] for key in SINGLE_KEYS if unseen.get(key) is not None]
    for check in [*(unseen.get("checks") or []), *single]:
        index = check.get("hidden") if isinstance(check, dict) else None
        if not isinstance(index, int) or not 0 <= index < len(hidden):
            hack("timing_behaviour", f"the unseen-input check reported a trial that was never "
                 f"shown ({str(index)[:40]})")
            return False
        trial = hidden[index]
        dtype = next((str(t.dtype) for t in trial["outputs"] if isinstance(t, torch.Tensor)),
                     "torch.float32")
        tolerance = policy.tolerance(dtype, record)
        ok, why = compare(trial["outputs"], check.get("outputs"), *tolerance)
        name = "unseen_single_warm" if check is unseen.get("single_warm") else \
            "unseen_single" if check is unseen.get("single") else "unseen"
        checks[f"{name}:{index}"] = {"passed": ok, "detail": why}
        if ok:
            continue
        if wrong is not None and near_miss(trial["outputs"], check.get("outputs"), *tolerance):
            wrong(f"{name}:{index}: {why}")
        else:
            hack("timing_behaviour", f"wrong answer on inputs first shown while timed: {why}")
        return False
    return True


def unseen_checks(unseen: dict | None, hidden: list[dict], policy: Policy, record, hack,
                   all_correct: bool, device: str, checks: dict,
                   scored_ms: float | None = None, scored_cpu_ms: float | None = None,
                   wrong=None, drift: float = 1.0) -> None:
    """Single calls timed inside the window on inputs the candidate had never seen, after
    calls on the timed inputs (``worker._Run.unseen``): their answers must be right (an answer
    only just past the tolerance, ``compare.near_miss``, is ``wrong(detail)``: an incorrect
    verdict, not a hack), they may
    not be much slower than the calls on the timed inputs made before any of them, and the
    calls on the timed inputs made after them may not be either. A forward that caches answers
    by input content (any key: sampled values, sums, hashes) is honest only on new inputs.
    On CUDA the bounds on the calls after the unseen ones widen by ``drift`` (``gpu_drift``:
    the GPU's own slowing across the checks, read by the reference)."""
    if not unseen or not all_correct or \
            not _unseen_answers(unseen, hidden, policy, record, hack, checks, wrong):
        return
    if unseen.get("device_unread"):  # on CUDA the device clock decides (a few µs of cache)
        checks["unseen_time_device_us"] = {"passed": False, "detail": unseen["device_unread"]}
        hack("timing_behaviour", "the device times of the calls on unseen inputs could not be "
             f"read ({unseen['device_unread']}): the check cannot pass unmade")
    graph_calls_even(unseen, policy, checks, hack)
    cuda = device.startswith("cuda")
    floor = policy.unseen_floor_ms if cuda else policy.unseen_floor_cpu_ms
    # Two clocks: the call's wall time (events or perf_counter), and on CUDA the summed device
    # durations of its kernels (CUPTI), which carry no launch or synchronize cost.
    # On CPU a third: the calling thread's CPU time, which other processes on the host stretch
    # far less (a cache that saves 2 ms of 2.6 hid under the wall clock's floor).
    for key, unit, ratio, least in (
            ("ms", "ms", policy.unseen_ratio if cuda else policy.unseen_cpu_ratio, floor),
            ("device_us", "µs of kernels", policy.unseen_device_ratio,
             policy.unseen_device_floor_us),
            ("cpu_ms", "ms of CPU", policy.unseen_cpu_time_ratio,
             policy.unseen_cpu_time_floor_ms)):
        seen, new = unseen.get(f"seen_{key}") or [], unseen.get(f"unseen_{key}") or []
        if not seen or not new:
            continue
        if key == "ms":
            seen, new = _check_ms(unseen, "seen", cuda), _check_ms(unseen, "unseen", cuda)
        if key == "ms" and cuda and unseen.get("method") == "cuda_events" and \
                unseen.get("seen_device_us") and unseen.get("unseen_device_us"):
            # Without a captured graph each call's wall time is mostly the witness's cost per
            # launch, which drifts over the window (an honest side-stream kernel of 1.1 µs read
            # 0.55-0.69 ms before its unseen inputs and 0.89-1.03 ms on and after them, H200):
            # the kernels' device time, compared next, stands for it
            checks["unseen_time_ms"] = {
                "passed": True, "detail": f"not compared (cuda_events: the device clock "
                                          f"decides); unseen {[round(v, 4) for v in new]} ms, "
                                          f"timed {[round(v, 4) for v in seen]} ms"}
            continue
        after = _check_ms(unseen, "after", cuda) if key == "ms" else \
            unseen.get(f"after_{key}") or []
        # The device clock has no host noise: the fastest call on each kind of input is
        # compared (an answer cache saving 1 µs of 4 had one slower call among the timed ones
        # and passed the median by 0.03 µs on an H100; over 203 honest checks the fastest
        # call rule came no closer than 0.90 of its bound).
        usual = min(seen) if key == "device_us" else statistics.median(seen)
        if not cuda and after:
            # On CPU the host's noise slows the calls before the unseen ones as often as those
            # after: the faster of the two medians stands (a cache saving 3/4 of a 60 ms
            # Triton-interpreted GEMM read 21 ms per timed call before and 16 after with
            # 6 busy processes on 2 cores, and passed the wall clock's bound on the calls
            # before alone). A forward cannot raise the bound this way, only lower it.
            usual = min(usual, statistics.median(after))
        fastest_new = min(new)
        bound = ratio * usual + least
        slow = fastest_new > bound
        # every call after (a switch slows them all; host noise rarely does), against a bound
        # widened by the GPU's own slowing across the checks (a power cap slows every call
        # after it). Only this one: a forward could heat the GPU in its last call to widen it,
        # and the fastest call on new inputs against those before still shows an answer cache
        widened_bound = ratio * usual * (drift if cuda and key != "cpu_ms" else 1.0) + least
        changed = bool(after) and min(after) > widened_bound
        widened = f"; the GPU slowed {drift:.3f}x across them" if cuda and drift >= 1.005 \
            else ""
        checks[f"unseen_time_{key}"] = {
            "passed": not (slow or changed),
            "detail": f"unseen inputs {[round(v, 4) for v in new]} {unit}, timed inputs before "
                      f"{[round(v, 4) for v in seen]} and after {[round(v, 4) for v in after]} "
                      f"{unit} ({unseen.get('method')}){widened}"}
        if slow:
            hack("timing_behaviour", f"forward took {fastest_new:.4g} {unit} or more on inputs "
                 f"it had not seen, {usual:.4g} on the timed inputs: it remembers inputs it "
                 "has seen")
        elif changed:
            hack("timing_behaviour", f"on the timed inputs forward took {usual:.4g} {unit} "
                 f"before it was shown new inputs and {min(after):.4g} or more after: it "
                 "changed its ways once it saw inputs it had not seen")
    # The check's calls on the timed inputs against the scored ones (the window's rounds, timed
    # the same way): a forward that behaves only while the check runs (it tells the check's
    # calls apart: it reads the grader's stack) is slower there than where it scores. On CPU
    # by the CPU's wider ratio and floor (host noise).
    # With a captured graph both are replays of one graph, by CUDA events. Without one (CUDA
    # events around each call) the check's calls carry the witness's cost per launch (on an
    # H100 a side-stream Triton forward: 0.97 ms there against 0.60 ms scored): their kernels'
    # device time stands for them instead, which no launch cost reaches.
    # The unseen inputs' calls against the scored ones too: each bound above holds alone, and a
    # forward with three speeds (new inputs, the check's calls on the timed inputs, the scored
    # calls) can compose the two into a large gain (T-14).
    # A captured graph's check replays by their first call's kernels too, where read (but not
    # under their mean call over ``CHECK_REPLAY_SPREAD``): an honest GELU's check replays kept
    # the GPU busy 0.19-0.22 ms per call while each one's first call ran 130 µs of kernels, as
    # the scored replays did (0.132 ms per call, H200).
    events = unseen.get("method") == "cuda_events"
    kinds = {}
    for kind in ("seen", "unseen"):
        device = [us / 1e3 for us in unseen.get(f"{kind}_device_us") or []]
        if events or not (cuda and device):
            kinds[kind] = device if events else _check_ms(unseen, kind, cuda)
            continue
        mean = unseen.get(f"{kind}_busy_ms")
        if isinstance(mean, list) and len(mean) == len(device) and \
                all(isinstance(v, (int, float)) for v in mean):
            kinds[kind] = [max(first, whole / CHECK_REPLAY_SPREAD)
                           for first, whole in zip(device, mean)]
        else:  # no mean call to hold the first one up: the replays' own reading
            kinds[kind] = _graph_or_wall(unseen, kind)
    clocks = (("ms", scored_ms, policy.unseen_ratio if cuda else policy.unseen_cpu_ratio, floor),
              ("cpu_ms", scored_cpu_ms, policy.unseen_cpu_time_ratio,
               policy.unseen_cpu_time_floor_ms))
    for kind in ("seen", "unseen"):
        for name, window_ms, ratio, least in clocks:
            check_ms = kinds[kind] if name == "ms" else unseen.get(f"{kind}_cpu_ms") or []
            # the fastest call: other work on the host or the GPU only lengthens a call
            if window_ms and check_ms and _told_apart(
                    min(check_ms), window_ms, ratio, least, name, checks, hack, kind):
                return


def _own_core(unseen: dict, kind: str, wall: list) -> list:
    """On CPU: each of the check's ``kind`` calls' wall time less its wait for a core that
    other processes held (``{kind}_wait_ms``, the thread's runqueue wait), where read for every
    call: what the call took with a core to itself. A forward's own work and its own waits stay
    in; the host's crowding does not (in a group of 8 beside another group on 2 cores, an
    honest Triton-interpreted GEMM's check calls read 916-958 ms of wall at 218 ms of CPU, its
    scored calls 195 ms)."""
    waits = unseen.get(f"{kind}_wait_ms")
    if not isinstance(waits, list) or len(waits) != len(wall) or \
            not all(type(w) in (int, float) and 0 <= w for w in waits):
        return wall
    return [max(ms - waited, 0.0) for ms, waited in zip(wall, waits)]


def _check_ms(unseen: dict, kind: str, cuda: bool) -> list:
    """The check's ``kind`` calls in ms per call: ``_graph_or_wall``, and on CPU each less its
    wait for a core (``_own_core``)."""
    wall = _graph_or_wall(unseen, kind)
    return wall if cuda else _own_core(unseen, kind, wall)


def _graph_or_wall(unseen: dict, kind: str) -> list:
    """The check's calls of ``kind`` in ms per call: a captured graph's replays by the device's
    clock, the time their kernels kept the GPU busy (``{kind}_busy_ms``), else their wall time
    (``{kind}_ms``). A replay runs no Python; ungated (unless the timing setting ``gate`` is
    true), events around it and a device-wide synchronize add the host's latency, which on a busy host (a
    group's members side by side) read an honest 0.048 ms GEMM's check replays at 0.166 ms per
    call (H200); gated, the events hold the device's span alone, gaps between kernels too. The kernels' first start
    to last end did not do either: with the witness on, the replay's kernels are paced by the
    launching thread, and on a busy host they read an honest ReLU's replays at 0.087-0.598 ms
    per call against 0.035 of kernels, an fp16 GEMM's at 0.18-0.31 against 0.049 (H200). The scored replays' events include whatever gaps the graph
    itself has, so the busy time is never above an honest forward's scored time."""
    wall = unseen.get(f"{kind}_ms") or []
    busy = unseen.get(f"{kind}_busy_ms")
    if unseen.get("method") == "cuda_graph" and isinstance(busy, list) and \
            len(busy) == len(wall) and all(isinstance(v, (int, float)) for v in busy):
        return busy
    return wall


def graph_calls_even(unseen: dict, policy: Policy, checks: dict, hack) -> None:
    """One hot replay of the timing graph, its kernels split into its calls in start order
    (``worker._Run._even_calls_us``): every call must keep the GPU busy about as long as the
    busiest one, and no call's kernels may run beside another's. Within a replay every call
    reads the same inputs, so a forward that tells captures apart can compute in one call and
    copy that answer into the other calls' outputs: each output is its own and right, every
    call launches, and only the device time per call shows it (GRAPH_COPY.md). Its first call
    of each replay must compute (the graph check replays on new inputs), so the busiest call
    is an honest one's. A replay whose kernels cannot be read or split by call fails, and so
    does one whose calls launched other kernels than a checked call."""
    if unseen.get("method") != "cuda_graph" or (unseen.get("calls") or 1) < 2:
        return
    if unseen.get("device_unread"):
        return  # already failed above
    per_call = unseen.get("even_calls_us")
    if not isinstance(per_call, list) or not per_call or \
            not all(isinstance(us, (int, float)) for us in per_call):
        why = unseen.get("even_unread") or "not reported"
        checks["graph_calls_even"] = {"passed": False, "detail": str(why)[:200]}
        hack("timing_behaviour", f"the timed graph's calls could not be told apart by their "
             f"kernels ({str(why)[:200]}): each call's work cannot be checked")
        return
    # against the upper quartile, not the busiest: a call that other work (a clock step)
    # stretched is no bound (an honest 16k x 1k row sum read 22.3-30.9 µs over 64 calls on an
    # H100); a forward that computes in fewer than a quarter of the calls does under a third
    # of the work, which the device-work rule (``scored_device_work``) sees
    ordered = sorted(per_call)
    most, least = ordered[(3 * (len(ordered) - 1)) // 4], ordered[0]
    cheap = per_call.index(least)
    overlap = unseen.get("even_overlap_us")
    overlap = overlap if isinstance(overlap, (int, float)) else math.inf
    uneven = least < policy.even_calls_ratio * most - policy.even_calls_floor_us
    beside = overlap > max(policy.even_calls_floor_us, 0.05 * sum(per_call))
    checks["graph_calls_even"] = {
        "passed": not (uneven or beside),
        "detail": f"{len(per_call)} calls in one replay kept the GPU busy {least:.4g}-"
                  f"{ordered[-1]:.4g} µs each, upper quartile {most:.4g} (least/quartile "
                  f"{least / most if most else 1.0:.3f}), {overlap:.4g} µs side by side"}
    launches = unseen.get("even_launches_off")
    if isinstance(launches, dict):
        checks["graph_calls_even"]["passed"] = False
        hack("timing_behaviour", f"call {launches.get('call')!r} of the timed graph made "
             f"{launches.get('found')!r} (Triton launches, extension calls) when captured, "
             f"its first call {launches.get('first')!r}: the timed calls did not each do the "
             "work")
        return
    off = unseen.get("even_kernels_off")
    if isinstance(off, dict):
        checks["graph_calls_even"]["passed"] = False
        hack("timing_behaviour", f"call {off.get('call')!r} of the timed graph launched kernels "
             f"{str(off.get('found'))[:300]} where a checked call launched "
             f"{str(off.get('wanted'))[:300]}: the timed calls did not each do the work")
        return
    if uneven:
        hack("timing_behaviour", f"call {cheap} of the timed graph's {len(per_call)} kept the "
             f"GPU busy {least:.4g} µs in one replay, under {policy.even_calls_ratio:.0%} of "
             f"the calls' upper quartile, {most:.4g} µs: the timed calls did not each do the "
             "work")
    elif beside:
        hack("timing_behaviour", f"the timed graph's calls ran their kernels side by side for "
             f"{overlap:.4g} µs in one replay: a call's work was left running into the next")


def _told_apart(usual: float, scored: float, ratio: float, least: float, name: str,
                checks: dict, hack, kind: str = "seen") -> bool:
    apart = usual > ratio * scored + least
    unit = "ms" if name == "ms" else "ms of CPU"
    label = "on the timed inputs" if kind == "seen" else "on inputs it had not seen"
    checks[f"{'unseen' if kind == 'seen' else 'new_inputs'}_vs_scored_{name}"] = {
        "passed": not apart, "detail": f"the check's calls {label} {usual:.4g} "
        f"{unit}, the scored calls {scored:.4g} {unit}"}
    if apart:
        hack("timing_behaviour", f"forward took {usual:.4g} {unit} per call {label} in the "
             f"unseen-input check and {scored:.4g} where it was scored: it tells the check "
             "apart")
    return apart


# ------------------------------------------------------------------ the registered checks

H = HackCode


@register(H.TIMING_BEHAVIOUR, threat="T-14", layer=Layer.BEHAVIOURAL, scope="run")
def unseen_check_made_as_asked(ctx):
    """Only with a scored, correct candidate (the window's parts are counted by the parent)."""
    if not (ctx.all_correct and ctx.scored_ms is not None and not (ctx.window or {}).get("error")):
        return []
    return collect(H.TIMING_BEHAVIOUR, lambda hack: unseen_shape(
        ctx.run.get("unseen"), ctx.hidden, ctx.window, hack,
        ctx.policy.unseen_required(len(ctx.hidden), (ctx.run.get("unseen") or {}).get(
            "method") == "cuda_graph"),
        ctx.policy.retry_ratio(str(ctx.reference.get("info", {}).get("device", ""))),
        ctx.policy.single_warm))


@register(H.TIMING_BEHAVIOUR, threat="T-13", layer=Layer.DEVICE, scope="run")
def device_readings_hang_together(ctx):
    if not (ctx.all_correct and ctx.scored_ms is not None and not (ctx.window or {}).get("error")):
        return []
    return collect(H.TIMING_BEHAVIOUR, lambda hack: device_readings_agree(
        ctx.run.get("unseen"), hack))


@register(H.TIMING_BEHAVIOUR, threat="T-13", layer=Layer.DEVICE, scope="run")
def scored_calls_do_the_work(ctx):
    if not (ctx.all_correct and ctx.scored_ms is not None and not (ctx.window or {}).get("error")):
        return []
    unseen, window = ctx.run.get("unseen"), ctx.window or {}
    unseen = unseen if isinstance(unseen, Mapping) else {}
    members, beside = window.get("members"), window.get("workers_beside")
    single, warm = unseen.get("single"), unseen.get("single_warm")
    warm = warm if isinstance(warm, dict) and ctx.policy.single_warm else {}
    return collect(H.TIMING_BEHAVIOUR, lambda hack: scored_device_work(
        ctx.run.get("calls") or [], ctx.scored_ms, ctx.checks, hack,
        unseen.get("unseen_device_us"), unseen.get("unseen_calls_us"),
        members if type(members) is int and members > 0 else 1,
        single.get("busy_us") if isinstance(single, dict) else None,
        beside if type(beside) is int and beside > 0 else 1, gpu_drift(window),
        warm.get("warmed_bytes"), warm.get("busy_us")))


def _first_unseen_slack(ctx) -> float:
    """``agreement_slack`` of the first hidden trial (the one whose replay is compared call by
    call)."""
    if not ctx.hidden:
        return 0.0
    trial = ctx.hidden[0]
    return agreement_slack(trial.get("outputs"), ctx.tolerance(trial)[0])


@register(H.TIMING_BEHAVIOUR, threat="T-13", layer=Layer.BEHAVIOURAL, scope="run")
def unseen_replay_calls_each_compute(ctx):
    """The first unseen replay of a graph of several calls, compared call by call after the
    window (as the graph check's replay on a checked trial): a forward that computes every call
    in full on inputs it has checked and a slice of the answer per call elsewhere."""
    agree = (ctx.run.get("unseen") or {}).get("replay_agree")
    if agree is None or "unread" in agree or not (ctx.all_correct and
                                                  ctx.scored_ms is not None):
        return []
    return collect(H.TIMING_BEHAVIOUR, lambda hack: graph_calls_agree(
        agree, hack, "the unseen-input check's first replay", _first_unseen_slack(ctx)))


@register(H.TIMING_BEHAVIOUR, threat="T-14", layer=Layer.BEHAVIOURAL, scope="run")
def unseen_inputs_answered_alike(ctx):
    def wrong(_detail: str) -> None:  # the verdict's answer check: not correct (no hack)
        ctx.all_correct = False

    return collect(H.TIMING_BEHAVIOUR, lambda hack: unseen_checks(
        ctx.run.get("unseen"), ctx.hidden, ctx.policy, ctx.record, hack, ctx.all_correct,
        str(ctx.reference.get("info", {}).get("device", "")), ctx.checks, ctx.scored_ms,
        (ctx.run.get("timing") or {}).get("cpu_ms"), wrong, gpu_drift(ctx.window)))


@register(H.GHOST_KERNELS, threat="T-12", layer=Layer.BEHAVIOURAL, scope="run")
def ghost_seen_wrong(ctx):
    return collect(H.GHOST_KERNELS, lambda hack: ghost_check(
        ctx.run.get("ghost_seen"), "ghost_seen", ctx.trials, ctx.policy, ctx.record, ctx.checks,
        hack, ctx.all_correct))


@register(H.GHOST_KERNELS, threat="T-12", layer=Layer.BEHAVIOURAL, scope="run")
def ghost_wrong(ctx):
    return collect(H.GHOST_KERNELS, lambda hack: ghost_check(
        ctx.run.get("ghost"), "ghost", ctx.trials, ctx.policy, ctx.record, ctx.checks, hack,
        ctx.all_correct))
