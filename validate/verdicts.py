"""Verdicts on numbers (parent side): the probe's measurements in, checks out.

``judge`` takes the probe's measurements (a dict of numbers) and a thresholds dict and returns
``{name: {"passed": True|False|None, "value": ..., "detail": str}}``. ``None`` means the check
was skipped (not applicable, or only meaningful on another device), which is never a pass.
Beside it: the tolerance a problem is graded at (``calibrate_tolerance``) and which traced ops
compute (``compute_ops``); the judges of real model code's patterns (``verdicts_realcode``) and
of a forward's time (``verdicts_timing``) are modules of their own. Pure functions of numbers and
op names: these modules import only the standard library, ``core.taxonomy`` and each other. The
measurements on tensors are validate/checks.py's, which re-exports every judge.
"""
from __future__ import annotations

import math

from kernelmill.core.taxonomy import AFFINE_OPS, moves_data_only, op_base
from kernelmill.validate.check_terms import TOLERANCE_BOUNDS, check
from kernelmill.validate.check_terms import fmt as _fmt
from kernelmill.validate.verdicts_realcode import judge_real_code
from kernelmill.validate.verdicts_timing import judge_launch


def compute_ops(ops: list[str]) -> list[str]:
    """The traced ops that compute something (data movement and allocation removed)."""
    return [o for o in ops if not moves_data_only(o)]


def affine_by_construction(ops: list[str]) -> bool:
    """True when every compute op traced is affine (the problem really is ``a*x + b``)."""
    return all(op_base(o) in AFFINE_OPS or op_base(o).rstrip("_") in AFFINE_OPS
               for o in compute_ops(ops))


# ---------------------------------------------------------------- tolerance

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


def summarize(checks: dict[str, dict], gating: tuple[str, ...] | None = None) -> tuple[bool, list]:
    """(passed, flags): passed only if no gating check failed; flags lists the failed ones."""
    flags = [name for name, c in checks.items() if c["passed"] is False
             and (gating is None or name in gating)]
    return not flags, flags
