"""The timed calls and the window's times: the worker's timed loop against its checked calls,
the timed CUDA graph replayed on a checked trial, the timing report against the parent's own
clock, and the memory roofline."""
from __future__ import annotations

import torch
from kernelmill.core.devices import device_peaks
from kernelmill.validate.window import verdict_timing

from ..compare import SKIPPED_INCORRECT, compare
from ..retry import device_short
from .probes import agreement_slack, graph_calls_agree
from .registry import Finding, HackCode, Layer, collect, register

H = HackCode

# A reported mean per-call time below this fraction of what the parent's own clock saw in a
# back-to-back loop is not believed. Graph replays back to back take the graph's time; CPU calls
# on shared cores are noisier (a forged report is off by orders of magnitude).
CLOCK_MARGIN = {"cuda_graph": 0.5, "perf_counter": 0.05}
# The device each timing method belongs to. A candidate's worker that reports a method unknown
# here, or one of another device than the reference's in the same window, is flagged: its report
# chose the wall-clock margin (an unknown method had none, so any speed passed: T-15).
METHOD_DEVICE = {"cuda_graph": "cuda", "cuda_events": "cuda", "perf_counter": "cpu"}


def bandwidth_gbs(info: dict) -> float | None:
    """Peak DRAM bandwidth: from the device's memory clock and bus width when torch reports
    them, else the device table (``core.devices.PEAKS``); None for a device it does not know
    (no bound rather than a wrong one)."""
    if info.get("bandwidth_gbs"):
        return float(info["bandwidth_gbs"])
    name = info.get("name")
    if not name:
        return None
    peaks, source = device_peaks(name)
    return peaks["bandwidth"] / 1e9 if source.startswith("table:") else None


def roofline_ms(reference: dict) -> float | None:
    """The memory roofline on the grading device: the reference's inputs, outputs and state,
    each moved once, at the device's bandwidth. Not the validator's roofline, which is the
    larger of this and the reference's FLOPs at the device's peak: an answer may do fewer FLOPs
    than the reference honestly (a sum after a GEMM is a GEMV), never move fewer bytes."""
    info = reference.get("info", {})
    if not str(info.get("device", "")).startswith("cuda"):
        return None
    bandwidth = bandwidth_gbs(info)
    if not bandwidth:
        return None
    trial = reference["trials"][0]
    tensors = [*trial["inputs"], *trial["outputs"], *reference.get("state_dict", {}).values()]
    nbytes = sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))
    return nbytes / (bandwidth * 1e9) * 1e3


def timing_fields(verdict: dict, reference: dict, window: dict | None) -> None:
    """Times from the window into the verdict; Inductor's through its ratio to eager, measured
    together in the reference run (each ratio from one window). Where the grader pools the
    reference's time (``grade.reference_pool``), the pooled time is the eager one and the
    window's own is kept beside it."""
    pool = (window or {}).get("reference_pool")
    timing = verdict_timing(_reference_as_pooled(window, pool)) if window else None
    if timing and pool:  # the reference's time over this problem's windows (``reference_pool``)
        own = ((window.get("participants") or {}).get("reference") or {}).get("ms")
        timing = {**timing, "reference_ms": pool["ms"], "reference_window_ms": own,
                  "reference_windows": pool["windows"],
                  "reference_spread_pct": pool["spread_pct"]}
    starved = reference_starved(timing)
    if starved:
        timing = None
    cand_ms = timing["candidate_ms"] if timing else None
    eager_ms = timing["reference_ms"] if timing else None
    ind, eag = reference.get("inductor") or {}, reference.get("eager") or {}
    inductor_ms = eager_ms * ind["ms"] / eag["ms"] if eager_ms and ind.get("ms") and \
        eag.get("ms") else None
    verdict["timing"] = timing
    verdict["timings"] = {"candidate_ms": cand_ms, "eager_ms": eager_ms,
                          "inductor_ms": inductor_ms, "roofline_ms": roofline_ms(reference)}
    if starved:
        verdict["timings"]["error"] = starved
    elif window and window.get("reference_unscored") and not pool and not window.get("error"):
        # the reference was not timed here and no pooled time of its timing method is kept
        verdict["timings"]["error"] = ("the reference was not timed in this window and no "
                                       "pooled time of its timing method was kept")
    elif window and window.get("error"):
        message = window["error"]["message"]
        if message.startswith(SKIPPED_INCORRECT):  # not timed: its answers were wrong already
            verdict["timings"]["skipped"] = "incorrect"
        else:
            verdict["timings"]["error"] = message
    candidate = ((window or {}).get("participants") or {}).get("candidate") or {}
    verdict["timings"]["candidate_wall_ms"] = candidate.get("wall_ms")


def _reference_as_pooled(window: dict | None, pool: dict | None) -> dict | None:
    """``window`` with its reference's median replaced by the pooled one (``pool``), its
    samples' count by the candidate's where the reference took no turn (``sampled``)."""
    if not window or not pool:
        return window
    parts = window.get("participants") or {}
    ref, cand = parts.get("reference") or {}, parts.get("candidate") or {}
    ref = {**ref, "ms": pool["ms"], "reps": ref.get("reps") or cand.get("reps") or 0}
    return {**window, "participants": {**parts, "reference": ref}}


def reference_starved(timing: dict | None) -> str | None:
    """Why a window's times cannot be compared, where the reference's timing graph could not be
    captured for want of device memory while the candidate's was: the reference was then timed
    call by call with events (each call's launch counted, none in a graph replay), which favours
    the candidate, and the memory it lacked may be what the candidate held. The window is then a
    failed one (``retry.transient``; where its grade shared the GPU the member is graded again
    alone, ``admitted``); None otherwise. A reference that is never capturable is timed with
    events in every window and compared as it is."""
    error = (timing or {}).get("reference_capture_error")
    candidate_method = str((timing or {}).get("method")).rsplit("/", 1)[-1]  # "ref/cand"
    if not device_short(error) or candidate_method != "cuda_graph":
        return None
    return (f"the reference's timing graph could not be captured for want of device memory "
            f"({str(error)[:200]}): its events timing is not comparable with the candidate's "
            "graph")


def _participants(window: dict | None) -> tuple[dict, dict]:
    parts = (window or {}).get("participants") or {}
    return parts.get("candidate") or {}, parts.get("reference") or {}


def method_check(window: dict | None, hack) -> None:
    candidate, reference = _participants(window)
    method, ref_method = candidate.get("method"), reference.get("method")
    device = METHOD_DEVICE.get(str(method))
    if method is not None and (device is None or device != METHOD_DEVICE.get(ref_method, device)):
        hack("timing_behaviour", f"the candidate's worker reported timing by {str(method)[:40]!r}"
             f", not a method of this window's device (the reference's: {ref_method})")


def clock_check(window: dict | None, hack) -> None:
    candidate, _ = _participants(window)
    margin = CLOCK_MARGIN.get(str(candidate.get("method")))
    wall, mean = candidate.get("wall_ms"), candidate.get("mean_ms")
    if mean is not None and wall and margin and mean < margin * wall:
        hack("timing_behaviour", f"reported {mean:.4g} ms per call on average; the parent's "
             f"clock saw {wall:.4g} ms per call back to back")


def roofline_check(verdict: dict, policy, hack) -> None:
    cand_ms, roof = verdict["timings"]["candidate_ms"], verdict["timings"]["roofline_ms"]
    if cand_ms is None or not verdict["correct"]:
        return
    if roof is not None and cand_ms < roof * policy.roofline_margin:
        hack("impossible_speed", f"{cand_ms:.4g} ms is below {policy.roofline_margin:g}x the "
             f"memory roofline {roof:.4g} ms")


def speedups(verdict: dict) -> None:
    cand_ms, timings = verdict["timings"]["candidate_ms"], verdict["timings"]
    if cand_ms is None or not verdict["correct"]:
        return
    if timings["eager_ms"]:
        verdict["speedup_vs_eager"] = timings["eager_ms"] / cand_ms
    if timings["inductor_ms"]:
        verdict["speedup_vs_inductor"] = timings["inductor_ms"] / cand_ms


def timings(verdict, reference, window, policy, hack) -> None:
    """The verdict's times and the checks on them, in the driver's order (for callers that
    judge a window alone)."""
    timing_fields(verdict, reference, window)
    method_check(window, hack)
    clock_check(window, hack)
    roofline_check(verdict, policy, hack)
    speedups(verdict)


# ------------------------------------------------------------------ the timed loop (scope "timed")

@register(H.TIMING_BEHAVIOUR, threat="T-13", layer=Layer.BEST_EFFORT, scope="timed")
def timed_launches_as_checked(ctx):
    timing = ctx.run.timing
    per_call = min((v.call["launches"] + v.call["ext_calls"] for v in ctx.views
                    if v.call["kind"] != "audit"), default=0)
    if timing["launches"] + timing["ext_calls"] < per_call * timing["calls"]:
        return [Finding(H.TIMING_BEHAVIOUR, f"{timing['launches'] + timing['ext_calls']} "
                        f"launches in {timing['calls']} timed calls, {per_call} per checked "
                        "call")]
    return []


@register(H.TIMING_BEHAVIOUR, threat="T-13", layer=Layer.BEHAVIOURAL, scope="timed")
def timed_answer_right(ctx):
    trials = ctx.trials
    timed = ctx.run.get("timed") or {}
    ok, why = compare(trials[0]["outputs"], timed.get("outputs"),
                      *ctx.policy.tolerance(str(trials[0]["outputs"][0].dtype)
                                            if trials[0]["outputs"] and
                                            isinstance(trials[0]["outputs"][0], torch.Tensor)
                                            else "float32", ctx.record))
    ctx.checks["timed:0"] = {"passed": ok, "detail": why}
    return [Finding(H.TIMING_BEHAVIOUR, f"wrong answer while timed: {why}")] \
        if not ok and ctx.all_correct else []


@register(H.OUTPUT_ALIASES_INPUT, threat="T-06", layer=Layer.BEHAVIOURAL, scope="timed")
def timed_output_owns_storage(ctx):
    return [Finding(H.OUTPUT_ALIASES_INPUT, "timed call: output shares storage with an input")] \
        if (ctx.run.get("timed") or {}).get("alias") else []


@register(H.INPUT_MUTATED, threat="T-06", layer=Layer.BEHAVIOURAL, scope="timed")
def timed_inputs_unchanged(ctx):
    timed = ctx.run.get("timed") or {}
    return [Finding(H.INPUT_MUTATED, f"timed calls: input {index} changed")
            for index, (before, after) in enumerate(zip(ctx.trials[0]["inputs"],
                                                        timed.get("inputs_after") or []))
            if isinstance(before, torch.Tensor) and not ctx.unchanged(before, after)]


@register(H.INPUT_MUTATED, threat="T-06", layer=Layer.BEST_EFFORT, scope="timed")
def inputs_unchanged_between_rounds(ctx):
    changed = (ctx.run.get("timed") or {}).get("changed_while_timed")
    if changed or not isinstance(changed, list):
        return [Finding(H.INPUT_MUTATED, f"timed calls: {changed[0]}" if changed else
                        "timed calls: no report of the inputs between timing rounds")]
    return []


@register(H.BACKGROUND_THREAD, threat="T-08", layer=Layer.BEST_EFFORT, scope="timed")
def no_thread_after_timing(ctx):
    threads = (ctx.run.get("timed") or {}).get("threads")
    return [Finding(H.BACKGROUND_THREAD, f"alive after timing: {threads[:3]}")] \
        if threads else []


@register(H.TIMING_BEHAVIOUR, threat="T-13", layer=Layer.BEHAVIOURAL, scope="timed")
def graph_replay_right(ctx):
    graph = ctx.run.get("graph_check")
    if graph is None:
        return []
    trial = ctx.trials[graph["trial"]]
    ok, why = compare(trial["outputs"], graph.get("outputs"), *ctx.tolerance(trial))
    ctx.checks[f"graph:{graph['trial']}"] = {"passed": ok, "detail": why}
    return [Finding(H.TIMING_BEHAVIOUR, f"the timed CUDA graph, replayed on trial "
                    f"{graph['trial']}'s inputs, gave a wrong answer: {why}")] \
        if not ok and ctx.all_correct else []


@register(H.OUTPUT_ALIASES_INPUT, threat="T-06", layer=Layer.BEHAVIOURAL, scope="timed")
def graph_output_owns_storage(ctx):
    graph = ctx.run.get("graph_check")
    return [Finding(H.OUTPUT_ALIASES_INPUT, "graph replay: output shares storage with an "
                    "input")] if graph is not None and graph.get("alias") else []


@register(H.TIMING_BEHAVIOUR, threat="T-13", layer=Layer.BEHAVIOURAL, scope="timed")
def graph_calls_each_compute(ctx):
    graph = ctx.run.get("graph_check")
    if graph is None:
        return []
    # the least over the shown trials: the trial replayed is the worker's word
    slack = min((agreement_slack(trial["outputs"], ctx.tolerance(trial)[0])
                 for trial in ctx.trials), default=0.0)
    return collect(H.TIMING_BEHAVIOUR, lambda hack: graph_calls_agree(graph.get("calls_agree"),
                                                                      hack, slack=slack))


# ------------------------------------------------------------------ the window (scope "window")

@register(H.TIMING_BEHAVIOUR, threat="T-15", layer=Layer.BEHAVIOURAL, scope="window")
def timing_method_of_device(ctx):
    return collect(H.TIMING_BEHAVIOUR, lambda hack: method_check(ctx.window, hack))


@register(H.TIMING_BEHAVIOUR, threat="T-15", layer=Layer.BEHAVIOURAL, scope="window")
def reported_time_within_parent_clock(ctx):
    return collect(H.TIMING_BEHAVIOUR, lambda hack: clock_check(ctx.window, hack))


@register(H.IMPOSSIBLE_SPEED, threat="T-15", layer=Layer.BEHAVIOURAL, scope="window")
def within_memory_roofline(ctx):
    return collect(H.IMPOSSIBLE_SPEED, lambda hack: roofline_check(ctx.verdict, ctx.policy,
                                                                   hack))
