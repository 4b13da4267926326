"""Verdicts on numbers (parent side): the probe's measurements in, checks out.

``judge`` takes the probe's measurements (a dict of numbers) and a thresholds dict and returns
``{name: {"passed": True|False|None, "value": ..., "detail": str}}``. ``None`` means the check
was skipped (not applicable, or only meaningful on another device), which is never a pass.
Beside it: the tolerance a problem is graded at (``calibrate_tolerance``) and which traced ops
compute (``compute_ops``). Pure functions of numbers and op names: this module imports only the
standard library and ``core.taxonomy``. The measurements on tensors are validate/checks.py's,
which re-exports every name here.
"""
from __future__ import annotations

import math
from typing import Any

from kernelmill.core.taxonomy import AFFINE_OPS, moves_data_only, op_base
from kernelmill.validate.contrast_views import admitted_beside_passthrough
from kernelmill.validate.contrast_views import admitted_by_offset as _admitted_by_offset
from kernelmill.validate.contrast_views import worst_view


def compute_ops(ops: list[str]) -> list[str]:
    """The traced ops that compute something (data movement and allocation removed)."""
    return [o for o in ops if not moves_data_only(o)]


def affine_by_construction(ops: list[str]) -> bool:
    """True when every compute op traced is affine (the problem really is ``a*x + b``)."""
    return all(op_base(o) in AFFINE_OPS or op_base(o).rstrip("_") in AFFINE_OPS
               for o in compute_ops(ops))


# ---------------------------------------------------------------- tolerance

# (floor, cap) of the calibrated tolerance per output dtype: the floor is what an honest kernel
# with a different summation order needs; above the cap the problem is too ill-conditioned to grade
# (workers run fp32 as IEEE fp32, TF32 off: harness_worker._ieee_fp32)
TOLERANCE_BOUNDS = {
    "float64": (1e-7, 1e-3),
    "float32": (1e-4, 5e-2),
    "float16": (1e-2, 1e-1),
    "bfloat16": (2e-2, 2e-1),
}


def calibrate_tolerance(noise: float | None, dtype: str, margin: float = 10.0) -> dict:
    """atol = rtol = max(floor, margin * noise): the tolerance the grader should use.

    ``noise`` is the mixed error of the declared-dtype output against an fp64 reference (the
    noise floor of an honest computation). ``within_cap`` says whether the result is gradable.
    """
    floor, cap = TOLERANCE_BOUNDS.get(dtype, TOLERANCE_BOUNDS["float32"])
    if noise is None or not math.isfinite(noise):
        return {"tol": floor, "floor": floor, "cap": cap, "within_cap": noise is None}
    tol = max(floor, margin * noise)
    return {"tol": float(f"{tol:.3g}"), "floor": floor, "cap": cap, "within_cap": tol <= cap}


# ---------------------------------------------------------------- verdicts (parent side)

DEFAULT_THRESHOLDS = {
    "sensitivity_margin": 10.0,   # "far more than the tolerance": differences beyond 10x tol ...
    "min_sensitive_fraction": 0.01,  # ... in at least 1% of the elements
    "max_zero_fraction": 0.99,    # all-zeros answer right on >= 99% of elements: degenerate
    "max_constant_fraction": 0.99,
    "min_ms": 0.1,
    "max_ms": 1000.0,
    "max_launch_ratio": 0.8,      # host time to issue forward / GPU time
    "max_dead_work": 0.5,         # share of the FLOP-counted work that cannot reach the output
    "dead_call_share": 0.1,       # ... or one call with this share of it, all unreachable
    "max_sliced_dead_work": 0.2,  # ... or this share in whole dead slices (channels, positions)
    "max_offset_slack": 0.05,     # rtol slack an offset adds / the output's variation
    "max_nonaffine_slack": 0.2,   # ... / the variation of its part not affine in its inputs
    "inflated_tolerance": 10.0,   # dtype floors above which a bf16-operand answer must fail
}


def check(passed: bool | None, value: Any = None, detail: str = "") -> dict:
    return {"passed": passed, "value": value, "detail": detail}


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3g}"


def judge_sensitivity(name: str, entries: list[dict], th: dict) -> dict:
    """entries: [{"label", "fraction"}] measured at ``sensitivity_margin`` x tol."""
    if not entries:
        return check(None, None, f"no {name} to vary")
    low = [e for e in entries if e["fraction"] < th["min_sensitive_fraction"]]
    value = min(e["fraction"] for e in entries)
    if low:
        what = ", ".join(f"{e['label']} (moves {e['fraction']:.1%} of elements)" for e in low)
        return check(False, value, f"output barely depends on {what}; needed: "
                     f"{th['min_sensitive_fraction']:.0%} of elements moving by more than "
                     f"{th['sensitivity_margin']:g}x the tolerance")
    return check(True, value, "varying " + ", ".join(e["label"] for e in entries) +
                 f" moves at least {value:.1%} of elements")


def judge_buffers(measured: dict | None, th: dict) -> dict:
    """The output depends on each floating-point buffer as on the weights (``judge_sensitivity``);
    buffers forward writes (running statistics in training mode) are not judged."""
    if not measured:
        return check(None, None, "model has no floating-point buffers")
    if "error" in measured:
        return check(None, None, f"not measured: {measured['error']}")
    written = measured.get("written") or []
    names = ", ".join(written[:4]) + (" ..." if len(written) > 4 else "")
    if not measured.get("entries"):
        return check(None, None, f"every floating-point buffer is written by forward ({names}): "
                     "state the model keeps, not judged")
    note = f"; written by forward, not judged: {names}" if written else ""
    verdict = judge_sensitivity("buffers", measured["entries"], th)
    verdict["detail"] += note
    return verdict


def judge(m: dict, th: dict | None = None) -> dict[str, dict]:
    """Turn the probe's measurements into checks. Missing measurements become skipped checks."""
    th = {**DEFAULT_THRESHOLDS, **(th or {})}
    checks: dict[str, dict] = {}
    tol = m["tolerance"]["tol"]
    checks["runs"] = check(True, m.get("output_shapes"), "forward ran at the declared size"
                           if not m.get("resized") else f"forward ran resized x{m['resized']:.3g}")
    checks["finite"] = check(m["finite"], m.get("nonfinite_fraction"),
                             "" if m["finite"] else "output contains NaN or Inf")
    checks["inputs_unchanged"] = check(not m["mutated_inputs"], m["mutated_inputs"] or None,
                                       "forward writes into its inputs: "
                                       f"{m['mutated_inputs']}" if m["mutated_inputs"] else "")

    det = m["deterministic"]
    if det["bitwise"]:
        ok, how = True, "bitwise equal on a rerun"
    elif det["error"] <= tol:
        ok, how = True, f"equal within {_fmt(det['error'])} (not bitwise) on a rerun"
    else:
        ok, how = False, f"rerun with identical inputs, weights and RNG differs by {_fmt(det['error'])}"
    rebuild = m.get("rebuild")
    if rebuild is not None:
        if rebuild["error"] > tol:
            ok = False
        how += f"; {rebuild['mode']}: " + ("bitwise" if rebuild["error"] == 0 else
                                           f"error {_fmt(rebuild['error'])}")
    checks["deterministic"] = check(ok, det["error"], how)

    stoch = m["stochastic_error"]
    checks["not_stochastic"] = check(
        stoch <= tol, stoch, "output unchanged by the global RNG state" if stoch <= tol else
        f"changing the RNG state before forward changes the output by {_fmt(stoch)} "
        "(randomness inside forward, e.g. Dropout in training mode)")

    vary = m.get("inputs_vary")
    checks["inputs_vary"] = check(
        vary is not False, vary,
        "get_inputs() gives the same tensors under every seed: no input is one an answer has "
        "not seen (a forward that keeps its one answer passes)" if vary is False else
        "get_inputs() draws other tensors under another seed" if vary else
        "get_inputs() gives no tensors")
    checks["input_sensitive"] = judge_sensitivity("inputs", m["input_sensitivity"], th)
    ws = m["weight_sensitivity"]
    if ws is None:
        checks["weight_sensitive"] = check(None, None, "model has no floating-point parameters")
    else:
        checks["weight_sensitive"] = judge_sensitivity("weights", [ws], th)
    checks["buffer_sensitive"] = judge_buffers(m.get("buffer_sensitivity"), th)

    zf = m["zero_fraction"]
    checks["not_near_zero"] = check(
        zf < th["max_zero_fraction"], zf,
        "an all-zeros answer passes the tolerance" if zf >= 1.0 else
        f"an all-zeros answer is right on {zf:.1%} of elements" if zf >= th["max_zero_fraction"]
        else f"all-zeros answer right on {zf:.1%} of elements")
    cf = m["constant_fraction"]
    if cf is None:
        checks["not_constant"] = check(None, None, "single-element output")
    else:
        checks["not_constant"] = check(
            cf < th["max_constant_fraction"], cf,
            f"a constant answer is right on {cf:.1%} of elements")

    aff = m["affine"]
    if not aff:
        checks["not_affine"] = check(None, None, "no output has an input's shape")
    else:
        worst = min(aff, key=lambda e: min(e["tensor"], e["channel"] if e["channel"] is not None
                                           else math.inf))
        resid = min(worst["tensor"], worst["channel"] if worst["channel"] is not None else math.inf)
        if resid > tol:
            checks["not_affine"] = check(True, resid, f"best affine fit error {_fmt(resid)}")
        else:
            nonaffine = m.get("input_nonaffine_ops")
            if nonaffine is None:  # no taint trace: judge by every op forward runs
                nonaffine = [o for o in compute_ops(m["aten_ops"])
                             if not affine_by_construction([o])]
            if not nonaffine:
                checks["not_affine"] = check(True, resid, "affine in its inputs by construction")
            else:
                checks["not_affine"] = check(
                    False, resid, f"output {worst['output']} equals a*x+b of input "
                    f"{worst['input']} within {_fmt(resid)} although forward applies "
                    f"{', '.join(nonaffine[:4])} to it (an inert nonlinearity, e.g. ReLU on "
                    "non-negative inputs)")

    ab = m["ablation"]
    if ab is None:
        checks["no_dead_ops"] = check(None, None, "no ablation variants")
    else:
        dead = ab["dead"]
        checks["no_dead_ops"] = check(
            not dead, dead or None,
            (f"{ab['tried']} ablations all change the output" if not dead else
             "removing these leaves the output unchanged: " + "; ".join(dead))
            + (f"; computing nothing, not counted: {'; '.join(ab['inert'])}"
               if ab.get("inert") else "")
            + (f" (stopped early: {ab['aborted']})" if ab.get("aborted") else ""))

    checks.update(judge_real_code(m, th))

    cal = m["tolerance"]
    if cal.get("noise") is None:
        checks["tolerance"] = check(None, cal["tol"], "no fp64 reference "
                                    f"({cal.get('reason', 'unavailable')}); dtype floor used")
    else:
        checks["tolerance"] = check(
            cal["within_cap"], cal["tol"],
            f"fp64 noise floor {_fmt(cal['noise'])}, atol=rtol={_fmt(cal['tol'])}" +
            ("" if cal["within_cap"] else f" above the {cal['dtype']} cap {cal['cap']:g}"))

    timing = m["timing"]
    if timing.get("device") != "cuda":
        checks["runtime"] = check(None, timing.get("eager_ms"), "GPU-only check (ran on cpu)")
        checks["launch_overhead"] = check(None, None, "GPU-only check (ran on cpu)")
    elif timing.get("eager_ms") is None:  # the timing worker did not run or failed
        why = timing.get("reason", "not timed")
        checks["runtime"] = check(None if timing.get("skipped") else False, None, why)
        checks["launch_overhead"] = check(None, None, why)
    else:
        ms = timing["eager_ms"]
        checks["runtime"] = check(th["min_ms"] <= ms <= th["max_ms"], ms,
                                  f"eager {ms:.4g} ms; band {th['min_ms']:g}-{th['max_ms']:g} ms")
        checks["launch_overhead"] = judge_launch(timing, th["max_launch_ratio"])
    return checks


def _unmeasured(value: Any, none_why: str) -> dict | None:
    """The skipped check for a measurement that is missing, not applicable or failed."""
    if value is None:
        return check(None, None, none_why)
    if isinstance(value, dict) and "error" in value:
        return check(None, None, f"not measured: {value['error']}")
    return None


def judge_dead_branches(bypass: Any) -> dict:
    """Sub-modules whose bypass (zeroed, or skipped where shapes allow) keeps the output within
    tolerance, on the declared parameters or with the constant ones drawn again, and call
    sites of the source's own lines whose bypass does so in both states."""
    skipped = _unmeasured(bypass, "no sub-module or line of the source computes anything")
    if skipped:
        return skipped
    dead, redrawn = bypass["dead"], bypass["dead_redrawn"]
    sites = bypass.get("dead_sites") or []
    if not dead and not redrawn and not sites:
        return check(True, bypass["tried"], f"{bypass['tried']} bypasses of "
                     f"{bypass['modules']} sub-modules and the source's calls all change the "
                     "output")
    parts = []
    if dead:
        parts.append("; ".join(dead))
    if redrawn:
        parts.append("with the constant parameters drawn again: " + "; ".join(redrawn))
    if sites:
        parts.append("calls: " + "; ".join(sites))
    return check(False, dead + redrawn + sites, "output stays within tolerance when these are "
                 "bypassed (a dead branch): " + " | ".join(parts))


def judge_constant_parameters(const: Any) -> dict:
    skipped = _unmeasured(const, "no parameter or buffer is constant")
    if skipped:
        return skipped
    if const["unused"]:
        return check(False, const["unused"], "drawing these constant parameters again leaves "
                     "the output within tolerance (they do nothing at any value): " +
                     "; ".join(const["unused"][:6]))
    return check(True, const["tried"], f"each of {const['tried']} constant tensor(s) drawn "
                 "again moves the output")


def judge_dead_work(live: Any, th: dict) -> dict:
    skipped = _unmeasured(live, "no matmul, convolution or attention work under autograd")
    if skipped:
        return skipped
    share = live["dead_share"]
    whole = [o for o in live["ops"] if o["share"] >= th["dead_call_share"] and o["live"] < 0.01]
    sliced = live.get("sliced_share", 0.0)
    if sliced > th["max_sliced_dead_work"] and not whole and share <= th["max_dead_work"]:
        return check(False, sliced, f"{sliced:.0%} of the matmul/conv/attention work makes "
                     "whole slices of its results (channels, positions) that never reach the "
                     "output: a kernel computes the rest only")
    if share > th["max_dead_work"] or whole:
        what = ", ".join(f"{o['label']} ({o['share']:.0%} of the work)" for o in whole[:4])
        return check(False, share, f"{share:.0%} of the matmul/conv/attention work cannot reach "
                     "the output" + (f"; none of {what} reaches it" if whole else "") +
                     " (a slice of the result, a mask that admits one element)")
    return check(True, share, f"{1 - share:.0%} of the matmul/conv/attention work reaches the "
                 "output")


def _of(changed: dict) -> str:
    """``"5 of 131072 elements (0.004%)"`` (the total where the measurement has one)."""
    total = changed.get("total")
    return (f"{changed['changed']} of {total} elements ({changed['fraction']:.3%})" if total
            else f"{changed['changed']} ({changed['fraction']:.3%})")


def _confirmed(exact: dict, kind: str) -> tuple[dict | None, str]:
    """What the noise changed of ``kind`` (``"jittered"``: integer and boolean outputs;
    ``"jumped"``: float outputs moved by 100 tolerances), over the draws of the inputs, where
    the near-ties it meets make an honest kernel's rounding fail ``bar`` of grades or more
    (the record's ``fails``: ``realcode.density.honest_failures``), else None; and a note on
    what the noise changed where that passes (a near-tie too rare for an honest kernel's
    rounding to meet often: a top-1 router over thousands of tokens). A record without the
    density: the full noise's change on the first draw alone."""
    first = exact.get("jumped" if kind == "jumped" else "jittered_changed")
    density = exact.get("density")
    if not density:
        return (first, "") if first and first["changed"] else (None, "")
    record = density["kinds"].get(kind)
    if not record or not record["full"]:
        return None, ""
    change = record["changed"]
    small = exact.get("small_jumped" if kind == "jumped" else "small_jittered_changed")
    draws = density["draws"]
    plural = "s" if draws != 1 else ""
    under = (f"{record['small']} under noise of {exact['small_jitter']:.1g} ({_of(small)})"
             if record["small"] and small else
             f"none under noise of {exact['small_jitter']:.1g}")
    if density.get("tiny_jitter"):
        under += f", {record['tiny']} under {density['tiny_jitter']:.1g}"
    honest = (f"{record['full']} near-ties under noise of {exact['jitter']:.1g} over {draws} "
              f"draw{plural} of the inputs, {under} over {density['small_draws']} draws: an "
              f"honest kernel's rounding (~{density['share'] * exact['jitter']:.1g} of an op's "
              f"RMS) fails about {record['grades']:.1%} of {density['calls']}-call grades "
              f"({density['bar']:.0%} fail the problem)")
    if record["fails"]:
        return change, f" over {draws} draw{plural} of the inputs; {honest}"
    gap = "" if record["small"] or record["tiny"] or density["share"] >= 0.1 else \
        " (a margin only the full noise crosses: no honest rounding reaches it)"
    return None, f" ({_of(change)} changed over {draws} draw{plural}; {honest}{gap})"


def judge_exact_outputs(exact: Any) -> dict:
    """Outputs decided by near-tied float values (integer and boolean outputs that change, float
    outputs that jump, under noise at the tolerance's scale) fail where the near-ties that noise
    and a tenth of it meet over several draws of the inputs make an honest kernel's rounding
    fail a twentieth of grades or more (``_confirmed``); rarer ones are reported. Float outputs
    that step under the smaller noise fail whether or not anything jumped; so do outputs that
    follow the order among ties, and integer outputs that change on one CPU thread."""
    skipped = _unmeasured(exact, "every output is floating-point and nothing in the forward "
                                 "decides from float values")
    if skipped:
        return skipped
    threads = exact["threads_changed"]
    reordered = exact.get("reordered") or {}
    changed = [part for part in (reordered.get("exact"), reordered.get("moved"))
               if part and part["changed"]]
    follows_ties = changed and check(
        False, changed[0]["fraction"], f"outputs follow the order among ties of a sort, "
        f"top-k or median-like selection, which no kernel defines: {_of(changed[0])} move when "
        "tied keys come out in another order (ask a stable sort, or break ties)")
    jumped, jump_note = _confirmed(exact, "jumped")
    if jumped:
        return check(False, jumped["fraction"], f"float outputs jump: {_of(jumped)} move by "
                     "100 tolerances or more when the float work carries noise of "
                     f"{exact['jitter']:.1g} of its magnitude{jump_note} "
                     + ("(no op decides: a pole or a cut made of several ops, or an output "
                        "too ill-conditioned for this tolerance)" if exact.get("undecided")
                        else "(they are decided by near-tied float values: a sign, a "
                             "rounding, a one-hot of an argmax)"))
    steps = exact.get("steps")
    if steps and steps["changed"]:
        return check(False, steps["fraction"], f"float outputs step: {_of(steps)} are off by "
                     "more than the tolerance under float noise of "
                     f"{exact['jitter'] / 10:.1g} of its magnitude and do not shrink with it (a "
                     "rounding or a threshold that honest rounding flips)")
    if not exact["outputs"]:
        return follows_ties or check(True, 0.0, "float outputs continuous under float noise"
                                     + jump_note)
    moved, moved_note = _confirmed(exact, "jittered")
    if moved or (threads and threads["changed"]):
        why = []
        if moved:
            why.append(f"{_of(moved)} change when the float work carries noise of "
                       f"{exact['jitter']:.1g} of its magnitude{moved_note}")
        if threads and threads["changed"]:
            why.append(f"{_of(threads)} change on one CPU thread")
        fraction = (moved or threads)["fraction"]
        return check(False, fraction, "integer/boolean outputs "
                     f"({', '.join(exact['outputs'])}) are graded exactly but are decided by "
                     "near-tied float values: " + "; ".join(why))
    return follows_ties or check(True, 0.0, "integer/boolean outputs stable under float noise "
                                 "and thread count" + moved_note + jump_note)


def judge_unique_writes(writes: Any) -> dict:
    skipped = _unmeasured(writes, "not measured")
    if skipped:
        return skipped
    if writes:
        return check(False, writes, "writes that reach one place twice, by repeated indices "
                     "or a view over shared memory (which value wins is up to the device and "
                     "its threads): " + "; ".join(writes))
    return check(True, None, "no write reaches one place twice")


def judge_contrast(entries: Any, dtype: str, th: dict, tol: float,
                   rounded: Any = None) -> dict:
    """The tolerance against what the output carries. Fails when the slack its relative term
    adds on the output's magnitude (beyond what an output varying about zero gets: ``realcode.
    contrast``'s ``excess``) exceeds ``max_offset_slack`` of the output's variation across
    inputs (a large offset), or when the reduced-precision answer passes only through that
    slack (``_admitted_by_offset``) or errs by a share of the variation of what the output
    computes beyond its inputs' passthroughs (``admitted_beside_passthrough``: the passthrough
    sets the output's scale and costs nothing), or when a calibrated tolerance
    ``inflated_tolerance`` times the dtype floor or more admits a reduced-precision answer
    (matmul-class operands rounded to bf16 for fp32: the noise of a cancelling offset set the
    tolerance). fp16 operands are not
    tried: where bf16's fail outright, fp16's land between the slack about zero and rtol on a
    magnitude of 2-10 in default-initialised classifiers' log-probabilities as in an offset's
    (``tests/hostile/open/REVIEW_SESSION13.md``, H1), and the rule cannot tell them apart. A reduced-precision
    answer passing a tolerance at its floor by the absolute term, where no passthrough sets the
    output's scale, is reported, not failed: it passes a quarter of KernelBench level 2 at CPU
    sizes (small softmax outputs, GEMMs summed
    over rows), a question for the tolerance's absolute floor. The output's variation is read
    also on its part that is not an affine function of its inputs (``contrast_views``): an
    identity passthrough carries the variation and the magnitude but costs nothing."""
    floor = TOLERANCE_BOUNDS.get(dtype, TOLERANCE_BOUNDS["float32"])[0]
    why = []
    value = None
    note = ""
    # ``rounded["error"]`` is the rounded answer's largest error; a measurement that failed
    # (``forwards._measured``) holds its reason there instead, a string: not measured
    if not (isinstance(rounded, dict) and isinstance(rounded.get("error"), (int, float))):
        rounded = None
    if rounded is not None:
        passes = rounded["error"] <= tol
        note = (f"; matmul/conv operands rounded to {rounded['dtype']} "
                f"{'pass' if passes else 'fail'} it (error {_fmt(rounded['error'])})")
        if passes and tol >= th["inflated_tolerance"] * floor:
            value = rounded["error"]
            why.append(f"the calibrated tolerance {tol:g} ({tol / floor:.0f}x the {dtype} floor) "
                       f"admits matmul/conv operands rounded to {rounded['dtype']} (error "
                       f"{_fmt(rounded['error'])})")
    finite = [e for e in (entries if isinstance(entries, list) else [])
              if isinstance(e, dict) and isinstance(e.get("ratio"), (int, float))
              and math.isfinite(e["ratio"])]
    # the whole output's view or its non-affine part's (contrast_views), each against its bar
    bars = (th["max_offset_slack"], th.get("max_nonaffine_slack", th["max_offset_slack"]))
    worst = worst_view(finite, bars)
    admitted = _admitted_by_offset(finite, rounded, tol) or \
        admitted_beside_passthrough(finite, rounded, tol)
    if admitted and not why:
        value = admitted["ratio"]
        why.append(admitted["why"])
    if worst is not None and worst["ratio"] > bars[worst["part"]]:
        value = worst["ratio"] if value is None else value
        excess = worst["excess"] if worst["excess"] is not None else tol * worst["magnitude"]
        whose = "its affine part's" if worst["part"] else "its"
        why.append(f"{worst['what']} varies by {worst['informative']:.3g} across inputs but "
                   f"rtol on {whose} magnitude ({worst['magnitude']:.3g}) allows {excess:.3g} "
                   f"more than an output varying about zero gets, {worst['ratio']:.1%} of that "
                   f"(above {bars[worst['part']]:.0%})")
    if why:
        return check(False, value, "; ".join(why) + ": a large offset, magnitude or "
                     "passthrough inflates the tolerance")
    if worst is None:
        return check(None, None, "no floating-point output that varies across inputs" + note)
    whose = "its non-affine part's" if worst["part"] else "its"
    what = "the output's affine part's" if worst["part"] else "the output's"
    return check(True, worst["ratio"], f"rtol on {what} magnitude "
                 f"({worst['magnitude']:.3g}) adds {worst['ratio']:.2%} of {whose} variation "
                 "across inputs to the slack" + note)


def judge_call_history(hist: Any, tol: float, reproducible: bool) -> dict:
    skipped = _unmeasured(hist, "not measured")
    if skipped:
        return skipped
    if not reproducible:
        return check(None, hist["error_vs_fresh"], "not reproducible (deterministic judges)")
    err = hist["error_vs_fresh"]
    if err > tol:
        return check(False, err, f"the output for one input differs by {_fmt(err)} between a "
                     "fresh model and one that ran on other inputs first (state kept across "
                     "calls, e.g. data-dependent initialisation on the first call)")
    later = hist.get("error_after_calls", 0.0)
    if later > tol:
        counters = ", ".join(hist.get("counters", [])[:4])
        return check(False, later, f"the output for one input differs by {_fmt(later)} once "
                     f"the counters a call moves ({counters}) stand where a grader's thousands "
                     "of calls leave them (a step-annealed value, a periodic redraw)")
    return check(True, err, "a fresh model and a used one agree"
                 + (", and after many calls" if hist.get("counters") else ""))


def judge_real_code(m: dict, th: dict) -> dict[str, dict]:
    """The checks for patterns real model code carries (``realcode``'s measurements); a probe
    that did not measure them gets them skipped."""
    tol = m["tolerance"]["tol"]
    reproducible = m["deterministic"]["error"] <= tol and m["stochastic_error"] <= tol
    return {
        "no_dead_branches": judge_dead_branches(m.get("submodule_bypass")),
        "constant_params_used": judge_constant_parameters(m.get("constant_parameters")),
        "no_dead_work": judge_dead_work(m.get("liveness"), th),
        "stable_exact_outputs": judge_exact_outputs(m.get("exact_outputs")),
        "unique_writes": judge_unique_writes(m.get("duplicate_writes", {"error": "not run"})),
        "contrast": judge_contrast(m.get("contrast"), m["tolerance"].get("dtype", "float32"),
                                   th, tol, m.get("reduced_precision")),
        "no_call_history": judge_call_history(m.get("call_history"), tol, reproducible),
    }


# What the probe measures of a forward's host syncs, carried beside the eager timing wherever
# it is taken: the count, the source's host reads in forward's loops, and ``device_work``.
SYNC_KEYS = ("host_syncs", "syncs_in_loops", "device_work")


def host_wait_ratio(eager_ms: float, busy_ms: float) -> float:
    """The time a forward's GPU waits on the host (for launches and for syncs alike) per ms it
    is busy: its eager time less its kernels' busy time, over that busy time. A forward that
    waits for the GPU at every step runs host and GPU one after the other, so its eager time is
    about its host time plus its GPU time, and this is its host time over its GPU time: the
    ratio a forward that never waits is judged by (host issue time over graph-timed GPU time),
    against the same threshold."""
    if busy_ms <= 0:
        return math.inf
    return max(0.0, eager_ms - busy_ms) / busy_ms


def judge_launch(timing: dict, max_ratio: float) -> dict:
    """Host time to issue forward over its GPU time: near 1 means the GPU waits on launches.
    A forward that syncs with the host (``host_syncs``) cannot be timed as a CUDA graph and its
    host time includes the waits: it is judged by ``host_wait_ratio`` of its eager time and its
    kernels' busy time (``device_work``), so a launch-bound loop with a sync per step fails
    like one without. A host time that reads launch-bound because its launches waited for
    room in the driver's queue passes (``_queued_launches``)."""
    ratio, ms = timing.get("launch_ratio"), timing["eager_ms"]
    if timing.get("host_syncs"):
        return _judge_syncing_launch(timing, max_ratio)
    ok = ratio is not None and ratio <= max_ratio
    head = f"host issue time {_fmt(timing.get('host_ms'))} ms vs GPU {ms:.4g} ms"
    queued = None if ok else _queued_launches(timing)
    if queued is not None:
        return check(True, ratio, head + queued)
    drove = timing.get("host_driver_allocations")
    held = f"; every host sample held {drove} or more of the memory allocator's calls into " \
        "the driver" if drove and not ok else ""
    return check(ok, ratio, head + ("" if ok else " (launch-overhead bound)") + held)


# Launches the driver queues ahead of the GPU before a launch waits for room (an H200 host
# issuing cuDNN's 3,676-kernel tiled FFT transposed convolution blocked after about 1,100).
LAUNCH_QUEUE = 1024
# The GPU waiting on the host for at most this share of its busy time in an eager call is no
# wait (the first launch, the sync after the last); readings further apart disagree
QUEUED_IDLE = 0.1
# A host that filled the queue returns from ``forward`` with at least this share of a queue's
# kernels still ahead of the GPU
QUEUED_TAIL = 0.5


def _queued_launches(timing: dict) -> str | None:
    """Why a host time that reads launch-bound is not, or None. A forward of ``LAUNCH_QUEUE``
    launches or more whose host is faster than its GPU fills the driver's queue and then waits
    inside its launches for room, so its host time tracks its GPU time (and grows with any
    other process's GPU work). The device's own record (``device_work``, read with the GPU
    alone) must show both: the host returned from ``forward`` with ``QUEUED_TAIL`` of a queue
    of kernels still ahead of the GPU (at their mean duration), and the eager call's wall time
    within ``QUEUED_IDLE`` of its kernels' busy time (the union of their intervals), so the GPU
    never waited on the host. A host about as fast as its GPU, or slower, never fills the
    queue: its host time is issue time and the verdict stands."""
    work = timing.get("device_work") or {}
    kernels, busy = work.get("kernels") or 0, work.get("busy_ms")
    wall, issue = work.get("eager_wall_ms"), work.get("eager_issue_ms")
    if timing.get("host_syncs") or kernels < LAUNCH_QUEUE or not busy or wall is None or \
            issue is None:
        return None
    ahead = QUEUED_TAIL * LAUNCH_QUEUE * busy / kernels
    if wall - issue < ahead or abs(wall - busy) > QUEUED_IDLE * busy:
        return None
    return (f", but its {kernels} launches, more than the driver queues ({LAUNCH_QUEUE}), "
            f"waited for room in the queue: with the GPU alone the host returned "
            f"{_fmt(wall - issue)} ms of work ahead of the GPU, which was busy {_fmt(busy)} ms "
            f"of the eager call's {_fmt(wall)} ms, never waiting on the host")


def _judge_syncing_launch(timing: dict, max_ratio: float) -> dict:
    ms, syncs, work = timing["eager_ms"], timing["host_syncs"], timing.get("device_work")
    head = f"forward waits for the GPU {syncs} time(s)"
    if not work or work.get("busy_ms") is None:
        why = (work or {}).get("error", "not measured")
        return check(None, None, f"{head} (.item(), .cpu(), nonzero, boolean masks) and its "
                     f"kernels' time is unknown ({why}): host time is not launch overhead")
    busy = work["busy_ms"]
    # Readings of the call's time, each too long for its own reason: the timed eager time
    # (another process, whose library may pick a slower algorithm under its memory cap), the
    # profiled call beside the busy time (the profiler's own cost) and the plain calls with
    # the GPU alone (``eager_wall_ms``). The host waits at most the least one's excess.
    walls = [w for w in (work.get("wall_ms"), work.get("eager_wall_ms")) if w is not None]
    wall = min(walls) if walls else None
    profiled = wall is not None and wall < ms
    ratio = host_wait_ratio(wall if profiled else ms, busy)
    ok = ratio <= max_ratio
    loops = timing.get("syncs_in_loops") or []
    label = "profiled call" if wall == work.get("wall_ms") else "call with the GPU alone"
    read = (f"its {label} {_fmt(wall)} ms (eager {ms:.4g} ms)" if profiled
            else f"eager {ms:.4g} ms")
    return check(ok, ratio, f"{head} and launches {work['kernels']} kernel(s); GPU busy "
                 f"{_fmt(busy)} ms of {read}: {_fmt(ratio)} ms waiting on the host "
                 "per GPU ms" + ("" if ok else " (launch- and sync-bound)")
                 + (f"; host reads in forward's loops: {', '.join(loops[:3])}"
                    + (f" (+{len(loops) - 3})" if len(loops) > 3 else "") if loops else ""))


def judge_inductor(result: dict | None, eager_ms: float | None, tol: float) -> dict:
    """Inductor: compiles, matches eager within the calibrated tolerance; speedup recorded."""
    if result is None:
        return check(None, None, "skipped")
    if result.get("skipped"):
        return check(None, None, result["skipped"])
    if result.get("error"):
        return check(False, None, f"torch.compile failed: {result['error']}")
    err = result["error_vs_eager"]
    speed = (eager_ms / result["ms"]) if eager_ms and result.get("ms") else None
    if err > tol:
        return check(False, speed, f"compiled output differs from eager by {_fmt(err)} > {tol:g}")
    return check(True, speed, f"matches (error {_fmt(err)}); {_fmt(result.get('ms'))} ms, "
                 f"speedup {_fmt(speed)}")


def summarize(checks: dict[str, dict], gating: tuple[str, ...] | None = None) -> tuple[bool, list]:
    """(passed, flags): passed only if no gating check failed; flags lists the failed ones."""
    flags = [name for name, c in checks.items() if c["passed"] is False
             and (gating is None or name in gating)]
    return not flags, flags
