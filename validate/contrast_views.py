"""The views ``checks.judge_contrast`` reads ``realcode.contrast``'s entries through (pure: the
standard library only).

Each entry measures one output (or its worst slice) over two input draws: its variation
(``informative``), its typical magnitude, and the slack rtol adds on that magnitude beyond what an
output of the same variation about zero gets (``excess``, ``ratio`` = excess / informative).
Where the output has the shape of floating-point inputs, the entry also carries ``nonaffine``:
the same numbers with the variation of the output's part that is not an affine function of
those inputs (``realcode.nonaffine``). An identity passthrough carries the variation of ``x +
0.01 * mlp(x)`` but costs nothing; the computed part is held against the slack the
passthrough's magnitude leaves it. A view is the whole output's numbers or the non-affine
part's, with the words that name what varies."""
from __future__ import annotations

import math
from typing import Any


def worst_ratio(entry: dict) -> float:
    """An entry's ratio, or its non-affine view's where that is higher."""
    return max(entry["ratio"], (entry.get("nonaffine") or {}).get("ratio", 0.0))


def views(entry: dict) -> list[dict]:
    """The entry as the whole output sees it and, where measured, as its non-affine part does:
    dicts of ``informative``, ``excess``, ``ratio``, ``magnitude``, ``output``, ``slice``,
    ``what`` (the words for what varies) and ``part`` (the non-affine part's view)."""
    k = entry["output"]
    where = f" ({entry['slice']})" if entry.get("slice") else ""
    found = [{**entry, "excess": entry.get("excess"), "what": f"output {k}{where}",
              "part": False}]  # no excess: a record from before it was measured
    part = entry.get("nonaffine")
    if isinstance(part, dict) and math.isfinite(part.get("ratio", math.inf)):
        taken = ("a linear map of its inputs' rows taken out" if part.get("fit") == "rows"
                 else "identity passthroughs, scaled copies and constants taken out")
        found.append({**entry, **part, "part": True,
                      "what": f"the part of output {k}{where} that is not an affine function "
                      f"of its inputs ({taken})"})
    return found


def worst_view(entries: list[dict], bars: tuple[float, float] = (1.0, 1.0)) -> dict | None:
    """The view of the highest ratio to its bar over every entry's views (``bars``: the whole
    output's, the non-affine part's; None: no entry)."""
    every = [v for e in entries for v in views(e)]
    return max(every, key=lambda v: v["ratio"] / bars[v["part"]]) if every else None


def admitted_by_offset(entries: list[dict], rounded: Any, tol: float) -> dict | None:
    """The output whose magnitude alone lets the reduced-precision answer pass: that answer is
    within the tolerance, but its absolute error there exceeds ``tol * (1 + informative)``, what
    the tolerance gives an output of the same variation about zero (an offset's slack, measured
    by the cheap wrong answer itself rather than by ``max_offset_slack``). The variation is the
    whole output's, or that of its non-affine part (what the answer computes beside a
    passthrough)."""
    if not isinstance(rounded, dict) or rounded.get("error", math.inf) > tol:
        return None
    errors = rounded.get("abs_errors") or []
    for e in entries:
        if e.get("slice"):  # the rounded answer's error is known per output, not per slice
            continue
        k = e["output"]
        diff = errors[k] if k < len(errors) else None
        for view in views(e):
            if diff is None or (view["excess"] or 0.0) <= 0.0:
                continue
            bare = tol * (1.0 + view["informative"])
            if diff > bare:
                return {"ratio": view["ratio"], "why": (
                    f"matmul/conv operands rounded to {rounded['dtype']} pass only through the "
                    f"slack rtol gives on output {k}'s magnitude ({e['magnitude']:.3g}): their "
                    f"error {diff:.3g} is over the {bare:.3g} an output varying by "
                    f"{view['informative']:.3g} about zero allows"
                    + (f" (what {view['what']} varies by)" if view["part"] else ""))}
    return None


# A reduced-precision answer within the tolerance that errs by this share of the variation of
# the output's part beyond its inputs' passthroughs (or more) is admitted by the passthroughs:
# they set the output's scale, cost nothing, and leave the computed part a tolerance of some
# percent of its own variation (bf16 operands err by about 2^-8 of their values, 0.4%; fp32
# work by 1e-6)
PASSTHROUGH_SHARE = 0.01


def admitted_beside_passthrough(entries: list[dict], rounded: Any, tol: float) -> dict | None:
    """The output whose passthroughs let the reduced-precision answer pass: that answer is
    within the tolerance, but off by ``PASSTHROUGH_SHARE`` or more of the variation of the
    output's non-affine part (a denoiser's network term at low noise, scaled by the noise level
    beside the noisy input it hands on)."""
    if not isinstance(rounded, dict) or rounded.get("error", math.inf) > tol:
        return None
    errors = rounded.get("abs_errors") or []
    for e in entries:
        k = e["output"]
        part = e.get("nonaffine")
        if e.get("slice") or not isinstance(part, dict) or k >= len(errors):
            continue
        spread = part.get("informative") or 0.0
        if spread > 0 and errors[k] >= PASSTHROUGH_SHARE * spread:
            return {"ratio": errors[k] / spread, "why": (
                f"matmul/conv operands rounded to {rounded['dtype']} pass, off by "
                f"{errors[k]:.3g} on output {k}, whose part that is not an affine function of "
                f"its inputs varies by {spread:.3g} ({errors[k] / spread:.1%} of it): the "
                "passthroughs of its inputs, which cost nothing, set the output's scale")}
    return None
