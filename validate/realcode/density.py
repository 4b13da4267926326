"""How dense the near-ties a forward's noise meets are, over several draws of its inputs
(``_density``), and the share of grades an honest kernel's rounding would fail by them
(``honest_failures``)."""
from __future__ import annotations

import itertools
import math

from .common import forward
from .moves import STEP_SCALE, _events, _summed
from .noise import _HonestNoise
from .pools import PoolPicks, pinned

# How often an honest kernel's rounding flips what the noise flips. The full noise's flips over
# ``DENSITY_DRAWS`` draws of the inputs are a Poisson count per call. Where margins spread evenly
# near zero, flips grow with the noise, so scaled down to an honest kernel's rounding
# (``ROUNDING_UNITS`` units in the last place of an op's RMS over the noise: 3e-7 for fp32, 0.3%
# of its noise) they estimate its flips (the spread part). Margins concentrated below that
# (twin classes, tokens tied by construction) flip as often under any noise: noise
# ``TINY_TIMES`` an honest kernel's rounding, in ``SMALL_DRAWS`` draws on each draw of the inputs
# whose full noise flipped something, counts them directly (its count less two standard
# deviations, a rate at most that much above honest rounding's: the concentrated part). The
# larger of the two, over a grade's ``GRADE_CALLS`` checked calls, is the share of grades the
# exact answer fails: ``HONEST_FAILS`` (one in twenty) or more fails the problem, where the noise
# a tenth as large as the full one (``STEP_SCALE``, as many draws) flips something too or honest
# rounding is not below it (a margin only the full noise crosses is a gap no fp32 rounding
# meets). One draw of the inputs is one realization of those counts (a sign mask of a
# projection: 1-11 flips under the full noise over 16 draws; counting the smaller noise's
# flipping draws on one draw of the inputs, the rule before, passed it in 5 of 16 and rejected a
# healthy top-1 router in 2 of 16): four draws pool a mean of 14 events for the mask against
# 9.5 at the bar.
DENSITY_DRAWS = 4
SMALL_DRAWS = 4
ROUNDING_UNITS = 5
TINY_TIMES = 3.0
GRADE_CALLS = 7
HONEST_FAILS = 0.05


def _low_rate(count: int, calls: int) -> float:
    """A Poisson count's rate per call less two standard deviations (none for a few events)."""
    return max(0.0, count - 2.0 * math.sqrt(count)) / calls if calls else 0.0


def honest_failures(full: int, tiny: int, draws: int, share: float) -> dict:
    """The share of ``GRADE_CALLS``-call grades an honest kernel's rounding fails, from
    ``full`` events under the full noise over ``draws`` draws of the inputs and ``tiny`` under
    noise ``TINY_TIMES`` its rounding over ``SMALL_DRAWS`` draws on each (the comment above):
    the rates per call of the spread and the concentrated margins, and the estimate."""
    if not draws:
        return {"spread": 0.0, "concentrated": 0.0, "grades": 0.0}
    spread = full / draws * share
    concentrated = _low_rate(tiny, draws * SMALL_DRAWS)
    return {"spread": spread, "concentrated": concentrated,
            "grades": 1.0 - math.exp(-GRADE_CALLS * max(spread, concentrated))}


def _fails(record: dict, draws: int, share: float) -> bool:
    """Whether a kind's counts fail the problem (``HONEST_FAILS``; where an honest kernel's
    rounding is below the smaller noise, that noise or the tiny one must flip something)."""
    return honest_failures(record["full"], record["tiny"], draws, share)["grades"] >= \
        HONEST_FAILS and (record["small"] > 0 or record["tiny"] > 0 or share >= STEP_SCALE)


def _density(model, inputs: list, ref: list, first: list, more, forward_seed: int, rel: float,
             seed: int, copies: bool, kinds: dict, dtype: str, picks: dict | None = None,
             scaled: tuple = ()) -> dict:
    """The near-ties the full noise (``rel``) and the noise a tenth as large meet, as events
    (``_events``) by each of ``kinds``' ``(moved, changed)`` pairs: on the check's own draw of
    the inputs (``inputs``, ``ref``; ``first`` holds its forward under the full noise, taken
    from it here so that the caller keeps no reference) and on up to ``DENSITY_DRAWS - 1``
    further draws (``more``), each against its own clean forward; ``SMALL_DRAWS`` draws of the
    smaller noise and of the tiny one (``TINY_TIMES`` an honest kernel's rounding, where that
    is below the smaller noise) on each draw whose full noise flipped something. A further
    draw whose inputs or forwards raise is left out (``skipped``; an error that poisons the
    device is raised).
    Each kind's record: its events under each noise, its changes summed over the draws, and
    ``honest_failures``' estimate (``share``: an honest kernel's rounding, for ``dtype``, over
    the noise). Stops early where every kind already fails. ``picks``: the check's draw's
    pool picks that only an unpool reads (``_decides``), which the noisy forwards are given;
    on a further draw those of its own clean forward. ``scaled``: the kinds whose full-noise
    events are counted only where the move is not the noise's own linear one (``moves.
    _nonlinear_mask``, against the same noise ``STEP_SCALE`` as large: ``first`` holds the
    check's draw's as its second item; a further draw's is made where such a kind's plain count
    finds events), and whose ``changed`` is then given it too."""
    import torch

    from ..forwards import _device_poisoned

    kind = getattr(torch, dtype, None)
    if not (isinstance(kind, torch.dtype) and kind.is_floating_point):
        kind = torch.float32  # the floor ``rel`` is fp32's where no float dtype is declared
    share = min(1.0, ROUNDING_UNITS * torch.finfo(kind).eps / 2 / rel)
    # the smaller noise, and where it is above an honest kernel's rounding the tiny one
    scales = {"small": rel * STEP_SCALE}
    if TINY_TIMES * share < STEP_SCALE:
        scales["tiny"] = rel * share * TINY_TIMES
    record = {name: {"full": 0, "small": 0, "tiny": 0, "changed": None, "small_changed": None}
              for name in kinds}
    draws, skipped = 0, []
    sources = itertools.chain([inputs], more or ())
    draw = 0
    while draws < DENSITY_DRAWS and draw < 2 * DENSITY_DRAWS:
        base = seed + draw * (SMALL_DRAWS + 1)
        clean = out = same = None
        try:
            given = next(sources)
            if draw:
                if picks:  # this draw's own picks, recorded from its clean forward
                    with PoolPicks(picks) as recorded:
                        clean = forward(model, given, forward_seed, copies)
                    held = recorded.kept
                else:  # (no dispatch mode over a forward that has none to record)
                    clean, held = forward(model, given, forward_seed, copies), None
                with _HonestNoise(rel, base), pinned(held):
                    out = forward(model, given, forward_seed, copies)
            else:
                (out, same), clean, held = first.pop(), ref, picks
        except StopIteration:
            break
        except Exception as exc:  # noqa: BLE001 — that draw is left out, the others pooled
            if _device_poisoned(exc):
                raise
            skipped.append(f"{type(exc).__name__}: {exc}".splitlines()[0][:200])
            clean = out = None
            draw += 1
            continue
        draw += 1
        flipped = False
        for name, (moved, changed) in kinds.items():
            events = _events(out, clean, moved)
            if events and name in scaled:  # the noise's own linear move, or a jump?
                if same is None:
                    with _HonestNoise(rel * STEP_SCALE, base), pinned(held):
                        same = forward(model, given, forward_seed, copies)
                events = _events(out, clean, moved, same)
                record[name]["changed"] = _summed(record[name]["changed"],
                                                  changed(out, clean, same))
            else:
                record[name]["changed"] = _summed(record[name]["changed"], changed(out, clean))
            record[name]["full"] += events
            flipped = flipped or bool(events)
        out = same = None
        for step in range(SMALL_DRAWS if flipped else 0):
            for noise, scale in scales.items():
                # seeds of their own: the draw the steps test scales shares the full noise's
                with _HonestNoise(scale, base + 1 + step), pinned(held):
                    smaller = forward(model, given, forward_seed, copies)
                for name, (moved, changed) in kinds.items():
                    record[name][noise] += _events(smaller, clean, moved)
                    if noise == "small":
                        record[name]["small_changed"] = _summed(record[name]["small_changed"],
                                                                changed(smaller, clean))
                smaller = None
        clean = given = held = None
        draws += 1
        if all(_fails(r, DENSITY_DRAWS, share) for r in record.values()):
            break  # failing already with the draws left adding nothing
    for r in record.values():
        r.update(honest_failures(r["full"], r["tiny"], draws, share))
        r["fails"] = draws > 0 and _fails(r, draws, share)
    return {"kinds": record, "draws": draws, "small_draws": draws * SMALL_DRAWS,
            "tiny_jitter": scales.get("tiny"), "share": share, "calls": GRADE_CALLS,
            "bar": HONEST_FAILS, "skipped": skipped}
