"""The verdicts on the patterns real model code carries (parent side): sub-modules and call sites
whose bypass changes nothing, constant parameters, work that cannot reach the output, outputs
exact where they should vary, duplicate writes, low-precision contrast, call history. Pure
functions of ``validate.realcode``'s measurements; ``judge_real_code`` is what ``verdicts.judge``
adds for them.
"""
from __future__ import annotations

import math
from typing import Any

from kernelmill.validate.check_terms import TOLERANCE_BOUNDS, check
from kernelmill.validate.check_terms import fmt as _fmt
from kernelmill.validate.contrast_views import admitted_beside_passthrough, worst_view
from kernelmill.validate.contrast_views import admitted_by_offset as _admitted_by_offset

__all__ = [  # what validate.checks re-exports
    "judge_call_history", "judge_constant_parameters", "judge_contrast", "judge_dead_branches",
    "judge_dead_work", "judge_exact_outputs", "judge_real_code", "judge_unique_writes",
]


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
