"""A documented difficulty score in [0, 1] and a tier for each validated problem.

Four terms, each in [0, 1], weighted and summed:

* ``ops`` (weight 0.35): how much there is to implement, ``log2(1 + n) / log2(1 + 32)`` capped at
  1, with ``n`` the number of compute aten ops forward runs (views and copies not counted).
* ``fusion`` (0.25): how much a kernel must fuse to win, ``(k - 1) / 7`` capped at 1, with ``k``
  the number of distinct compute ops (one op leaves nothing to fuse; eight or more is a lot).
* ``inductor`` (0.2): beating PyTorch is harder where a compiler already beats eager by far,
  ``log2(speedup) / 2`` clipped to [0, 1] (4x Inductor speedup = 1). Unknown: 0.5.
* ``headroom`` (0.2): eager near the roofline bound leaves little to gain,
  ``1 - log10(headroom) / 2`` clipped to [0, 1] (at the bound = 1, 100x above = 0). Unknown: 0.5.

Tiers: ``easy`` below 0.35, ``medium`` below 0.6, ``hard`` from 0.6.
"""
from __future__ import annotations

import math

WEIGHTS = {"ops": 0.35, "fusion": 0.25, "inductor": 0.2, "headroom": 0.2}
TIERS = ((0.35, "easy"), (0.6, "medium"), (math.inf, "hard"))


def _clip(x: float) -> float:
    return min(1.0, max(0.0, x))


def difficulty(compute_ops: list[str], *, inductor_speedup: float | None = None,
               headroom: float | None = None) -> dict:
    """``{"score", "tier", "terms"}`` from the traced compute ops and the timing measurements."""
    n = len(compute_ops)
    kinds = len(set(compute_ops))
    terms = {
        "ops": _clip(math.log2(1 + n) / math.log2(33)),
        "fusion": _clip((kinds - 1) / 7),
        "inductor": 0.5 if not inductor_speedup or inductor_speedup <= 0 else
        _clip(math.log2(inductor_speedup) / 2),
        "headroom": 0.5 if not headroom or headroom <= 0 else _clip(1 - math.log10(headroom) / 2),
    }
    score = round(sum(WEIGHTS[k] * v for k, v in terms.items()), 4)
    tier = next(name for limit, name in TIERS if score < limit)
    return {"score": score, "tier": tier, "terms": {k: round(v, 4) for k, v in terms.items()},
            "n_ops": n, "n_kinds": kinds}
