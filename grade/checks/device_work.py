"""The device-work bounds: the GPU busy time of the worker's calls, by the device's own clock,
held against the scored time and against each other. The calls on new inputs (fresh, unseen,
the one-call graph's checks) do the whole work; the calls on seen inputs and the scored calls
may not do much less (``scored_device_work``); and the worker's own device readings must hang
together (``device_readings_agree``). The registered checks that adapt them to findings are in
``probes`` (their order there is the order they run in)."""
from __future__ import annotations

import math
import statistics
from collections.abc import Mapping

# A scored call may take less than the least GPU busy time of the checked calls by this much:
# graph replays of honest kernels read 0.82-1.10 of it on an H100 (warm caches, no launch gaps);
# a forward that does its work in one captured call of N (it can tell a capture, and the graph's
# calls by the inputs' placement or by counting) reads about 1/N.
DEVICE_WORK_RATIO = 0.5
DEVICE_WORK_FLOOR_US = 1.0
# A call of the timing graph on new inputs (an unseen replay's first call, after the L2 flush)
# against the one-call graph's call (the check, made warm: below), each made alone in the same
# window, each a call of a graph the same forward was captured into: an honest forward does
# the same work in both. Honest and hostile forwards whose calls compute the answer read
# 0.90-1.40 (81 hostile suite verdicts and 12 fp16 GEMM windows, H200, with the check made
# after the flush too; made warm, 0.98-1.96); a timing graph whose calls each compute a
# quarter of a 2048² GEMM into every output of their block, kept in step with the timer's
# captures so that the one-call graph is whole (``graph_slice_in_step``), read 0.56 (27.6 µs
# against 48.8) and passed the scored bound (``DEVICE_WORK_RATIO``: 25.8 µs scored against
# 47.5), which leaves room for the placements' and the caches' differences between a replay
# and the checked calls. This bound, the least device work of a call on new inputs
# (``ones`` below) and ``SINGLE_UNDER_FIRST`` read only this check, on inputs just loaded:
# the warm one (``single_warm``, inputs read into the L2 cache first) would loosen the first two
# for a memory-bound forward whose inputs fit the cache (a graph computing halves would read
# about 1.1 here against an honest 1M-element scale-add's 6.4 µs cold and 2.8 hot, H100) and
# tighten the third (that scale-add about 0.44 against 0.3).
FIRST_VS_ONE_RATIO = 0.7
# A scored call against the one-call check's call, which is made warm: on inputs no call has
# seen, loaded right before it (the placement it reads: ``_Run.load``), with no flush, as a
# scored call finds the caches. Both are a call of a graph the same forward was captured into.
# A timing graph whose first calls are whole and whose later calls compute halves in pairs
# (``graph_slice_bookend``) passes the first-call bound (its first call is whole),
# ``graph_calls_even`` (the halves are most of its calls) and the scored bound; here it reads
# its halves: 0.61-0.64 on a 2048² GEMM, alone and in a group (H200). Honest answers read
# 0.84-1.24 (the whole hostile suite, the window's Triton and KernelBench answers alone and in
# groups of 8; cold, the same check had read 1.4-2x an honest small kernel's scored call). Not
# an honest memory-bound one whose copies fit in the L2 cache: a 1M-element scale-add read
# 0.51-0.54 (H100, alone and in groups), its scored calls finding their inputs in the cache and
# the check its inputs fresh from the host. The timing setting ``single_warm`` makes a second
# check on a hidden trial of its own, after this one, its inputs read into the cache first
# (``timer.warm_cache``), and this bound takes the faster of the two; no other bound reads it.
SCORED_VS_ONE_RATIO = 0.75
# ... the check divided by the GPU's drift across the unseen checks (it is made last) by at
# most this much: a forward can heat the GPU after its check (an untimed replay follows it),
# and the whole ``DRIFT_CAP`` would take the bound to 0.56, under the bookend's halves
SCORED_VS_ONE_DRIFT = 1.1
# Checked calls run beside other grades' (a group's members, the other slots), time-sliced on
# one GPU: an honest GEMM's fresh calls read 2.0-2.3x its kernels' time alone (H200, groups of
# 8; 2.09x graded alone among 16 slots). The window's
# calls on unseen inputs, made alone, may lower the fresh calls' least by at most this factor
# (they count a replay's first call, which a forward could leave empty on new inputs).
GROUP_CONTENTION = 2.0
# ... except that a call whose answer is the one compared, made alone in the window on inputs
# never seen before, lowers it further: down to the crowd the fresh calls ran in, the group's
# members or the GPU workers its grader ran on the device beside them (``grade.beside``),
# whichever is more. A group's members start their checked calls together, each beside the
# others: an honest GEMM's fresh calls read 5.9x its kernels' time alone (H200, groups of 8,
# 4 groups at once), and was flagged at 2x; a single grade's among 16 slots read 5.8x
# (KernelBench's level1_1 GEMM, H200), flagged at 2x. Such a call is an unseen replay of a
# timing graph of one call, or the one-call graph's check (``UnseenFacts.single``). A replay
# of a graph of several calls stands for none: its calls can each write a slice into every
# call's output (every output whole once the replay ends, every call reading even at a slice's
# time), or copy the first call's answer and pad (review of the crowd's bound, H1).

# The unseen checks' bounds widen by the slowing the trusted reference saw across them
# (``gpu_drift``), by at most this factor: a power-capped GEMM's kernels ran 21-31% longer after
# a larger-scaled input (H200). Only the bound on the calls after the unseen inputs widens: a
# forward that heats the GPU in its last call widens that one as far as this, no further.
DRIFT_CAP = 1.35


def gpu_drift(window: Mapping | None) -> float:
    """How much the GPU itself slowed across the unseen checks: the reference's round right
    after them over its round right before (``window.run_window``'s ``clock_witness``), at
    least 1 and at most ``DRIFT_CAP``; 1 where either is missing. The reference is trusted
    code in its own process: a submission reaches its pace only through the GPU's."""
    clock = (window or {}).get("unseen_clock_ms") or {}
    before, after = clock.get("before"), clock.get("after")
    if not all(isinstance(v, list) and v and all(isinstance(x, (int, float)) and x > 0
                                                 for x in v) for v in (before, after)):
        return 1.0
    return min(DRIFT_CAP, max(1.0, statistics.median(after) / statistics.median(before)))


# The one-call checks' facts, in the order they are made: the check on inputs just loaded,
# then (``single_warm``) the one on inputs read into the L2 cache first
SINGLE_KEYS = ("single", "single_warm")


def scored_device_work(calls: list[dict], scored_ms: float, checks: dict, hack,
                       unseen_us: list | None = None, unseen_calls: list | None = None,
                       members: int = 1, single_us=None, beside: int = 1,
                       drift: float = 1.0, single_warmed=None, warm_us=None) -> None:
    """The GPU busy time of every call against that of the calls on new inputs (``fresh``: the
    least of them, as an autotuner's or a JIT's first call is longer). Every fresh call may
    run beside other work on the GPU, time-sliced (a group's members, the other grades of a
    busy grader: an honest GEMM graded alone among 16 slots read 14.9 ms of kernels on new
    inputs and 7.2 on a repeat), so the window's calls on unseen inputs, made alone
    (``unseen_us``: each replay's first call), lower that least down to ``GROUP_CONTENTION``
    times less; where a call whose answer is the one compared was made (an unseen replay of a
    one-call graph, ``unseen_calls``, or the one-call graph's check, ``single_us``), that call
    lowers it instead, down to the crowd the fresh calls ran in: ``members`` of a group, or
    ``beside``, the most GPU workers the grader ran on the device at once while the
    candidate's fresh calls ran, its own included (``grade.beside``). (A replay's first call
    may be a slice of the work; the one-call check is all of it, so its floor stands alone: a
    graph doing a third of the work per call is caught against it, as the 2x floor on first
    calls would let it pass.) Calls on inputs the
    forward had seen (refill, repeat, audit) may not do much less device work than those: a
    forward that remembers answers serves them from a cache. Nor may the scored calls: a
    forward that does less device work where it is timed (a captured graph whose calls mostly
    launch empty kernels into a kept output, or each compute a slice of it) reads far below.
    Every call of an honest one does the same work (T-13, T-14: the fresh calls' least is the
    bound, as a forward serving the calls on seen inputs from a cache makes the least checked
    call tiny). The scored calls are held to the one-call check's call, and where a second
    was made on inputs read into the L2 cache first (``warm_us``, ``single_warmed`` bytes of
    them: the timing setting ``single_warm``), to the faster of the two; no other bound reads
    that one."""
    busy = [(c.get("kind"), c.get("trial"), c["busy_us"]) for c in calls
            if isinstance(c.get("busy_us"), (int, float)) and c["busy_us"] > 0]
    fresh = [us for kind, _trial, us in busy if kind == "fresh"]
    if not busy:
        return
    least = min(fresh) if fresh else min(us for _k, _t, us in busy)
    alone = [us for us in unseen_us or () if _positive(us)]
    ones = [r[0] for r in unseen_calls or () if isinstance(r, list) and len(r) == 1 and
            _positive(r[0])] + ([float(single_us)] if _positive(single_us) else [])
    made = least
    if fresh and ones:  # (the whole call's work alone: the first calls' floor is not needed)
        least = max(min(least, *ones), least / max(GROUP_CONTENTION, members, beside))
    elif fresh and alone:
        least = max(min(least, *alone), least / GROUP_CONTENTION)
    bound = DEVICE_WORK_RATIO * least - DEVICE_WORK_FLOOR_US
    cheap = [(kind, trial, us) for kind, trial, us in busy if kind != "fresh" and us < bound]
    if fresh and cheap:
        kind, trial, us = cheap[0]
        hack("timing_behaviour", f"the {kind} call on trial {trial}'s inputs, seen before, kept "
             f"the GPU busy {us:.4g} µs, under {DEVICE_WORK_RATIO:.0%} of the least of the calls "
             f"on new inputs ({least:.4g} µs): answers remembered")
    if alone and _positive(single_us):
        # (the check is made last, after the unseen replays: a GPU that slowed across them,
        # as the reference read it, ``drift``, slowed it too)
        first, one = min(alone), float(single_us) / max(1.0, drift)
        short = first < FIRST_VS_ONE_RATIO * one - DEVICE_WORK_FLOOR_US
        checks["first_call_vs_one_call_us"] = {
            "passed": not short, "detail": f"a call of the timing graph on new inputs "
            f"{first:.4g} µs (after the L2 flush), the one-call graph's {one:.4g} µs (its "
            "inputs just loaded), each alone in the window"}
        if short:
            hack("timing_behaviour", f"a call of the timing graph on new inputs kept the GPU "
                 f"busy {first:.4g} µs, under {FIRST_VS_ONE_RATIO:.0%} of the one-call graph's "
                 f"call ({one:.4g} µs), alone in the same window: the timing graph's calls do a "
                 "slice of the work each")
    if not scored_ms:
        return
    scored_us = scored_ms * 1e3
    if _positive(single_us):
        # a scored call against the one-call check's, made warm (its inputs just loaded, no
        # flush) as a scored call finds its caches: a graph whose calls mostly do a slice reads
        # its slice, whichever calls it leaves whole (the first, the last); against the warm
        # check's where it was made faster (its inputs read into the L2 cache too)
        # (each reading the worker's word: the warm one held where the check on inputs just
        # loaded is, at ``SINGLE_UNDER_FIRST`` of the first calls alone, so that no warm report
        # takes this bound lower than a report of the other could; read only where the worker
        # said it read inputs into the cache)
        one = float(single_us)
        if _positive(warm_us) and warm_us < one and _positive(single_warmed):
            one = min(one, max(float(warm_us), SINGLE_UNDER_FIRST * min(alone, default=0.0)))
        hot = one < float(single_us)
        one /= min(max(1.0, drift), SCORED_VS_ONE_DRIFT)
        # (the worker's word on its reads before the call: for the report, not the bound)
        warmed = f", {single_warmed / 2**20:.3g} MiB of them read into the L2 cache" \
            if hot else ""
        low = scored_us < SCORED_VS_ONE_RATIO * one - DEVICE_WORK_FLOOR_US
        checks["scored_vs_one_call_us"] = {
            "passed": not low, "detail": f"scored {scored_us:.4g} µs per call, the one-call "
            f"graph's call {one:.4g} µs (on new inputs just loaded{warmed}, alone in the "
            "window)"}
        if low:
            hack("timing_behaviour", f"a scored call took {scored_us:.4g} µs, under "
                 f"{SCORED_VS_ONE_RATIO:.0%} of the one-call graph's call on new inputs "
                 f"({one:.4g} µs, its caches as a scored call finds them): the timing graph's "
                 "calls do a slice of the work each")
    apart = scored_us < bound
    checks["scored_vs_checked_device_us"] = {
        "passed": not apart, "detail": f"scored {scored_us:.4g} µs per call, the calls on new "
        f"inputs kept the GPU busy {least:.4g} µs at least (fresh {made:.4g}; alone in the "
        f"window: first calls {min(alone, default=0):.4g}, one-call {min(ones, default=0):.4g}"
        f"; crowd {max(members, beside)})"}
    if apart:
        hack("timing_behaviour", f"a scored call took {scored_us:.4g} µs, under "
             f"{DEVICE_WORK_RATIO:.0%} of the least GPU time of a call on new inputs "
             f"({least:.4g} µs): the timed calls did less work than the checked ones")


# A replay's kernels' busy time counts overlapping kernels once, so it fits in the CUDA events'
# span around the replay (queued behind a stream gate, the device's span alone; without the
# gate, its launch and its synchronize too, unless ``replay_sync`` is off: ``Timer.once``);
# the two clocks (CUPTI's, the
# events') differ by well under this share and a few µs.
BUSY_IN_SPAN = 1.1
BUSY_IN_SPAN_US = 5.0
# The one-call check's call against the first calls of the unseen replays of the timing graph:
# each a call alone on inputs no call had seen, so an honest forward does the same work in both
# (they read 0.71-1.1 of each other, H200, with both after the L2 flush; the check is made warm,
# its inputs just loaded, which a memory-bound call reads faster).
SINGLE_UNDER_FIRST = 0.3


def device_readings_agree(unseen: dict | None, hack) -> None:
    """The worker's own device readings held to each other, where they must agree for any
    forward (each one is the worker's word; a report that lowers one bound alone does not hang
    together): each unseen replay's per-call busy times (``unseen_calls_us``) count the timing
    graph's ``calls`` and begin with its first call's (``unseen_device_us``); a one-call check
    reported beside device readings that did not fail (``device_unread``) has a busy time, which
    fits in its replay's event span (``single.ms``) and is not under ``SINGLE_UNDER_FIRST`` of
    the least first call of the unseen replays."""
    facts = unseen if isinstance(unseen, Mapping) else {}  # (``facts.UnseenFacts``, a dict)
    if facts.get("device_unread"):
        return  # already a hack (``unseen_checks``)
    calls, replays = facts.get("calls"), facts.get("unseen_calls_us")
    firsts = facts.get("unseen_device_us")
    if any(v is not None and not isinstance(v, list) for v in (replays, firsts)):
        hack("timing_behaviour", "the unseen replays' busy times were reported as "
             f"{type(replays).__name__} and {type(firsts).__name__}: its readings do not hang "
             "together")
        return
    firsts = firsts or []
    if type(calls) is int and calls > 0 and isinstance(replays, list):
        off = [len(r) if isinstance(r, list) else type(r).__name__ for r in replays
               if not (isinstance(r, list) and len(r) == calls)]
        if off:
            hack("timing_behaviour", f"an unseen replay of the {calls}-call timing graph was "
                 f"reported with {off[0]} calls' busy times: its readings do not hang together")
            return
        if len(firsts) != len(replays) or any(
                not (_positive(f) and _positive(r[0]) and math.isclose(f, r[0], rel_tol=1e-6))
                for f, r in zip(firsts, replays)):
            hack("timing_behaviour", "the unseen replays' first calls were reported apart from "
                 "their calls' busy times: its readings do not hang together")
            return
    for key in SINGLE_KEYS:
        single = facts.get(key)
        if not isinstance(single, dict):
            continue
        busy, span = single.get("busy_us"), single.get("ms")
        if busy is None and not firsts:
            return  # no device readings made (no witness): the checks that need them say so
        if not _positive(busy) or not _positive(span) or \
                busy > BUSY_IN_SPAN * span * 1e3 + BUSY_IN_SPAN_US:
            name = "warm one-call check" if key == "single_warm" else "one-call check"
            hack("timing_behaviour", f"the {name}'s kernels kept the GPU busy "
                 f"{busy if _positive(busy) else 'no'} µs in a replay timed at "
                 f"{span if _positive(span) else 'no'} ms: its readings do not hang together")
            return
    single = facts.get("single")
    if not isinstance(single, dict):
        return
    busy = single.get("busy_us")
    # (the check on inputs just loaded: the warm one reads a memory-bound call faster)
    first = [float(v) for v in firsts if _positive(v)]
    if first and busy < SINGLE_UNDER_FIRST * min(first):
        hack("timing_behaviour", f"the one-call check's call kept the GPU busy {busy:.4g} µs, "
             f"under {SINGLE_UNDER_FIRST:.0%} of the least first call of the unseen replays "
             f"({min(first):.4g} µs): its readings do not hang together")


def _positive(us) -> bool:
    return isinstance(us, (int, float)) and not isinstance(us, bool) and math.isfinite(us) \
        and us > 0
