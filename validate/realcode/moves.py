"""How a forward's outputs moved under noise: float elements that jumped by ``JUMP``
tolerances (``_jumped``), jumps that are not the noise's own linear move (``_nonlinear``),
steps that do not shrink with the noise (``_steps``), exact elements that changed
(``_exact_changed``), and the near-ties one draw's change counts (``_events``)."""
from __future__ import annotations

from .. import checks as C

# A float output element moved by this many times its tolerance under honest noise jumped: the
# noise itself moves a continuous output by about the tolerance
JUMP = 100.0


def _jumped(out: list | None, ref: list, tol: float, times: float = JUMP) -> dict:
    """How many float output elements moved by more than ``times`` (``JUMP``) their tolerance
    (``tol + tol * |ref|``), of all float elements (float64 blocks: no full-size copies)."""
    import torch

    total = sum(b.numel() for b in ref if b.is_floating_point())
    if out is None or not C.shapes_equal(out, ref):
        return {"changed": total, "fraction": 1.0 if total else 0.0, "total": total}
    bad = 0
    for a, b in zip(out, ref):
        if b.is_floating_point():
            for a64, b64 in C._blocks64(a.detach(), b.detach()):
                bad += int(((a64 - b64).abs() > times * tol * (1.0 + b64.abs())).sum())
                bad += int((torch.isfinite(a64) != torch.isfinite(b64)).sum())
    return {"changed": bad, "fraction": bad / total if total else 0.0, "total": total}


# Where nothing decides, a move of ``JUMP`` tolerances may still be the noise's own: the noise
# follows an op's RMS, which on the small elements of a wide output (a prefix sum's first
# terms, a triangular product near its diagonal) is many tolerances. Such a move is linear in
# the noise; a jump is not: under the same noise ``STEP_SCALE`` as large, an element that
# jumped either jumps again (keeping its whole step) or not (keeping none of it), either way
# off the scaled move by a tenth of its step or more (``JUMP`` / 10 tolerances at least). An
# element counts as jumped where it is off the scaled move by half that many tolerances and by
# more than this share of its whole move: a step riding on a linear move up to 9 times larger
# is counted, a smooth function's curvature (a tenth of the noise's reach beyond its linear
# range: ``exp``, a steep ``tanh``) is not.
NONLINEAR = 0.01


def _nonlinear(out: list | None, smaller: list | None, ref: list, tol: float) -> dict:
    """``_jumped`` counting only the float output elements whose move under the full noise
    (``out``) is not that under the same noise ``STEP_SCALE`` as large (``smaller``) scaled
    back (off it by ``JUMP * STEP_SCALE / 2`` tolerances and by more than ``NONLINEAR`` of the
    move), and those that turn non-finite or finite under either: jumps where nothing decides,
    not the noise's own move."""
    import torch

    total = sum(b.numel() for b in ref if b.is_floating_point())
    if out is None or smaller is None or not (C.shapes_equal(out, ref)
                                              and C.shapes_equal(smaller, ref)):
        return {"changed": total, "fraction": 1.0 if total else 0.0, "total": total}
    bad = 0
    for a, s, b in zip(out, smaller, ref):
        if b.is_floating_point():
            for a64, s64, b64 in C._blocks64(a.detach(), s.detach(), b.detach()):
                bad += int(_nonlinear_mask(a64, s64, b64, tol).sum())
    return {"changed": bad, "fraction": bad / total if total else 0.0, "total": total}


def _nonlinear_mask(a64, s64, b64, tol: float, times: float = JUMP):
    """``_nonlinear``'s elements of one block (float64): moved by ``times`` tolerances under
    the full noise (``a64``) and off that move scaled to the smaller noise (``s64``), or
    non-finite where ``b64`` is finite (or the other way) under either."""
    import torch

    move, bound = a64 - b64, tol * (1.0 + b64.abs())
    left = (s64 - b64 - STEP_SCALE * move).abs()
    jumped = (move.abs() > times * bound) & (left > JUMP * STEP_SCALE / 2 * bound) & \
        (left > NONLINEAR * move.abs())
    finite = torch.isfinite(b64)
    return jumped | (torch.isfinite(a64) != finite) | (torch.isfinite(s64) != finite)


# A continuous output's error shrinks with the noise that makes it (by this factor, to first
# order); an element decided by a rounding or a threshold keeps its step wherever the smaller
# noise still flips it. A sum of steps of random sign shrinks by sqrt(STEP_SCALE) (0.32), so
# an element off by more than the tolerance under the smaller noise that kept more than
# ``STEP_KEPT`` of its error stepped.
STEP_SCALE = 0.1
STEP_KEPT = 0.2
# ... and steps flip where the noise crosses a threshold: under a tenth of the noise, at most
# this share of the elements off under the whole of it (a fixed-point quantizer's: a quarter)
STEP_FALL = 0.5


def _steps(out: list | None, smaller: list | None, ref: list, tol: float) -> dict:
    """How many float output elements are off ``ref`` by more than their tolerance under the
    noise ``STEP_SCALE`` as large (``smaller``) and kept more than ``STEP_KEPT`` of their
    error under the full noise (``out``): steps too small for ``JUMP``, a quantizer's
    rounding read on by a few layers."""
    import torch

    total = sum(b.numel() for b in ref if b.is_floating_point())
    if out is None or smaller is None or not (C.shapes_equal(out, ref)
                                              and C.shapes_equal(smaller, ref)):
        return {"changed": 0, "fraction": 0.0, "total": total}
    bad = flipped = 0
    for a, s, b in zip(out, smaller, ref):
        if b.is_floating_point():
            for a64, s64, b64 in C._blocks64(a.detach(), s.detach(), b.detach()):
                big, small = (a64 - b64).abs(), (s64 - b64).abs()
                bound = tol * (1.0 + b64.abs())
                off = (small > bound) & (small > STEP_KEPT * big)
                bad += int((off & torch.isfinite(small)).sum())
                flipped += int(((big > bound) & torch.isfinite(big)).sum())
    # steps flip where the noise crosses a threshold: fewer under less noise (``STEP_FALL``).
    # As many under a tenth of it are no noise's doing (an element compared with a copy of
    # itself noised apart: a top-k's own boundary element), and no kernel's
    if bad > STEP_FALL * flipped:
        bad = 0
    return {"changed": bad, "fraction": bad / total if total else 0.0, "total": total}


def _exact_changed(out: list | None, ref: list) -> dict:
    """How many non-float output elements differ, and their fraction (all when shapes differ)."""
    total = bad = 0
    for b in ref:
        if not (b.is_floating_point() or b.is_complex()):
            total += b.numel()
    if out is None or not C.shapes_equal(out, ref):
        return {"changed": total, "fraction": 1.0, "total": total}
    for a, b in zip(out, ref):
        if not (b.is_floating_point() or b.is_complex()):
            bad += int((a != b).sum())
    return {"changed": bad, "fraction": bad / total if total else 0.0, "total": total}


def _summed(total: dict | None, part: dict) -> dict:
    """Changed elements summed over draws, against the elements of all those draws, and the
    draws that changed any."""
    total = total or {"changed": 0, "total": 0, "draws_changed": 0}
    changed, elements = total["changed"] + part["changed"], total["total"] + part["total"]
    return {"changed": changed, "total": elements,
            "fraction": changed / elements if elements else 0.0,
            "draws_changed": total["draws_changed"] + bool(part["changed"])}


def _exact_moved(a, b, _smaller=None):
    """Which elements of an integer or boolean output changed (None for a float one)."""
    return None if b.is_floating_point() or b.is_complex() else a != b


def _jump_moved(tol: float, times: float = JUMP):
    """Which elements of a float output moved by ``times`` tolerances or more (``_jumped``);
    given the output under the same noise ``STEP_SCALE`` as large (``smaller``), only those
    whose move is not that one's scaled back (``_nonlinear_mask``)."""
    import torch

    def moved(a, b, smaller=None):
        if not b.is_floating_point():
            return None
        a64, b64 = a.double(), b.double()
        if smaller is not None:
            return _nonlinear_mask(a64, smaller.double(), b64, tol, times)
        return ((a64 - b64).abs() > times * tol * (1.0 + b64.abs())) | \
            (torch.isfinite(a64) != torch.isfinite(b64))
    return moved


def _spots(a, b, moved, smaller=None) -> int | None:
    """The near-ties one output's change counts: along the dimension (size-one ones dropped)
    where the indices of the elements ``moved`` marks are sparsest for its size, how many
    indices there hold one (a flipped token moves one row of a one-hot, or the whole row of a
    routed expert's output, whether tokens lead or follow: its other dimension fills up or
    holds the two classes of every flip); its marked elements where it has one dimension (or
    slices too large to mark whole); None for an output ``moved`` does not read. Blocks of
    whole leading slices. ``smaller``: the output under the same noise a tenth as large,
    passed to ``moved`` beside each block."""
    shape = [n for n in b.shape if n != 1] or [1]
    b = b.detach().reshape(shape)
    if moved(b[:0], b[:0]) is None:
        return None
    if not b.numel():
        return 0
    if a is None:  # no comparable output: every index changed
        return min(shape)
    a = a.detach().reshape(shape)
    if smaller is not None:
        smaller = smaller.detach().reshape(shape)
    if len(shape) == 1 or b[0].numel() > C.CHUNK:
        if smaller is None:
            return sum(int(moved(x, y).sum()) for x, y in C._blocks(a, b))
        return sum(int(moved(x, y, z).sum()) for x, y, z in C._blocks(a, b, smaller))
    step = max(1, C.CHUNK // b[0].numel())
    leading, held = 0, [None] * len(shape)
    for start in range(0, shape[0], step):
        near = slice(start, start + step)
        mask = moved(a[near], b[near]) if smaller is None else \
            moved(a[near], b[near], smaller[near])
        leading += int(mask.flatten(1).any(1).sum())
        for dim in range(1, len(shape)):
            others = tuple(d for d in range(len(shape)) if d != dim)
            seen = mask.any(dim=others)
            held[dim] = seen if held[dim] is None else held[dim] | seen
    counts = [leading] + [int(h.sum()) for h in held[1:]]
    return min(zip((c / n for c, n in zip(counts, shape)), counts))[1]


def _events(out: list | None, ref: list, moved, smaller: list | None = None) -> int:
    """The near-ties a draw's change counts: the most any one output counts (``_spots``: an
    index and the one-hot made from it count one near-tie once). ``smaller``: the outputs
    under the same noise a tenth as large, for ``moved`` to tell the noise's own linear move
    from a jump."""
    same = out is not None and C.shapes_equal(out, ref)
    scaled = smaller is not None and same and C.shapes_equal(smaller, ref)
    counts = [_spots(out[i] if same else None, b, moved, smaller[i] if scaled else None)
              for i, b in enumerate(ref)]
    return max((c for c in counts if c is not None), default=0)
