"""How much a tolerance leaves to chance: ``contrast`` (the slack the tolerance's relative term
adds on the output's magnitude next to the output's variation across inputs) and ``reduced_precision`` (the
output of a program whose matmul-class operands are rounded to a lower precision, and its
errors: ``rounded_errors``)."""
from __future__ import annotations

import math

from .. import checks as C
from ..contrast_views import worst_ratio
from .common import forward
from .nonaffine import nonaffine_view, rearranged, row_map_spread, same_shaped

# Dimensions this small are read slice by slice too (``contrast``): channels, variables, heads
CONTRAST_SLICES = 64


def _contrast_of(y, z, tol: float, pairs: list | None = None,
                 rows: tuple | None = None) -> dict | None:
    """``contrast``'s measurement of one tensor over two input draws (None: nothing finite),
    with its non-affine view (``nonaffine``) where ``pairs`` of same-shaped inputs give one,
    or else (none, or their view is not taken: their fit leaves nine tenths of the change, or
    its remainder is rounding), given ``rows`` (both draws' inputs), where a linear map of the
    inputs' rows does."""
    import torch

    if y.numel() == 0:
        return None
    # sums kept on the device and read once with the median (``checks.all_finite``'s note: a
    # read waits for a shared GPU, and ``contrast`` measures up to 64 slices per dimension);
    # the squared changes in the pair's working precision, summed in fp64, first
    square, count = _squared_change(y, z, exact=False)
    sample = C._as64(C._sample(C._flat(y))).abs()
    finite = torch.isfinite(sample)
    median = torch.where(finite, sample, math.nan).nanmedian()
    square, count, kept, magnitude = torch.stack([
        torch.as_tensor(v, dtype=torch.float64, device=sample.device)
        for v in (square, count, finite.sum(), median)]).tolist()
    if not math.isfinite(square) or square < count * SQUARE_FLOOR:
        # a change not finite, an fp32 square past its range or below its normal numbers
        square, count = (float(v) for v in _squared_change(y, z, exact=True))
    if not count or not kept:
        return None
    informative = math.sqrt(square / count / 2.0)
    excess = tol * max(0.0, magnitude - 1.0 - informative)
    found = {"informative": informative, "magnitude": magnitude, "excess": excess,
             "ratio": excess / informative if informative > 0 else math.inf}
    view = None
    if pairs:
        view = nonaffine_view(y, z, pairs, tol, magnitude, informative)
    if view is None and rows:  # no input reaches it element by element, or none explains it
        try:
            mapped = row_map_spread(y, z, *rows)
        except RuntimeError:  # a measurement that cannot be taken is no view
            mapped = None
        if mapped is not None:
            view = nonaffine_view(y, z, [], tol, magnitude, informative, mapped)
            if view is not None:
                view["fit"] = "rows"
    if view is not None:
        found["nonaffine"] = view
    return found


# A mean squared change under this is summed again in fp64: fp32 squares of changes under
# about 1e-19 lose their precision, and under 2.6e-23 read zero
SQUARE_FLOOR = 1e-36


def _squared_change(y, z, exact: bool) -> tuple:
    """The sum of ``(y - z)**2`` over the finite changes and their count (device tensors or
    numbers). Not ``exact``: every change counted, each squared in the pair's working
    precision (``checks._working_pair``) and summed in fp64 (a third of the fp64 path's memory
    traffic): a non-finite change makes the sum non-finite, and the caller asks again."""
    import torch

    square = count = 0.0
    if not exact:
        for a, b in C._blocks(y, z):
            a, b = C._working_pair(a, b)
            square = torch.sub(a, b).square_().sum(dtype=torch.float64) + square
            count += a.numel()
        return square, count
    for a, b in C._blocks64(y, z):
        d = a - b
        finite = torch.isfinite(d)
        square = torch.where(finite, d * d, 0.0).sum() + square
        count = finite.sum() + count
    return square, count


def contrast(ref: list, alt: list, tol: float, inputs: list | None = None,
             alt_inputs: list | None = None) -> list[dict]:
    """Per float output present in both input draws: its informative scale, the RMS of its
    change between the two draws over sqrt(2) (the spread of one element across inputs: the
    part a constant offset does not carry), its typical magnitude (median |y|), ``excess``, the
    slack the tolerance's relative term gives on that magnitude beyond what the tolerance gives
    an output of the same variation about zero, and ``ratio``, the excess over the informative
    scale. Then, per dimension of at most ``CONTRAST_SLICES``, the slice of the highest ratio
    (``slice``: "dim d = i"): an offset carried by a few channels (temperatures in Kelvin
    beside near-zero variables) leaves the whole output's median untouched.

    The tolerance allows ``tol * (1 + |y|)`` (atol = rtol): about zero, ``tol * (1 +
    informative)``. What an offset adds is ``tol * (median |y| - 1 - informative)``, none while
    the magnitude stays under 1 plus the variation: an output of 0.45 +- 1e-4 (a sigmoid of a
    bias) is graded by the absolute term as if it had no offset, and a cheap wrong answer that
    passes it passes without the offset too.

    Where the output has the shape of floating-point inputs (both draws' ``inputs`` and
    ``alt_inputs`` given), each measurement also carries ``nonaffine`` (``realcode.nonaffine``):
    the same numbers with the output's variation replaced by that of its part that is not an
    affine function of those inputs. An identity passthrough (``x + 0.01 * mlp(x)``) carries
    the variation and the magnitude but costs nothing; the computed part is what the slack is
    held against."""
    found = []
    for k, (y, z) in enumerate(zip(ref, alt)):
        if not y.is_floating_point() or y.shape != z.shape or y.numel() == 0:
            continue
        pairs = (same_shaped(y, inputs, alt_inputs) or rearranged(y, z, inputs, alt_inputs)) \
            if inputs and alt_inputs else []
        whole = _contrast_of(y, z, tol, pairs,
                             (inputs, alt_inputs) if inputs and alt_inputs else None)
        if whole is None:
            continue
        found.append({"output": k, **whole})
        for d in range(y.dim() if y.dim() > 1 else 0):
            if not 2 <= y.shape[d] <= CONTRAST_SLICES:
                continue
            # the non-affine view is the whole output's: a slice's remainder (one row's
            # log-sum-exp) can be constant within it, and the least of 64 such is near zero
            parts = [(i, _contrast_of(y.select(d, i), z.select(d, i), tol))
                     for i in range(y.shape[d])]
            parts = [(i, e) for i, e in parts if e is not None and math.isfinite(worst_ratio(e))]
            if parts:
                i, worst = max(parts, key=lambda p: worst_ratio(p[1]))
                if worst["excess"] > 0 or (worst.get("nonaffine") or {}).get("excess", 0.0) > 0:
                    found.append({"output": k, "slice": f"dim {d} = {i}", **worst})
    return found


# Matmul-class calls whose operands a reduced-precision answer would round (their results are
# turned back to the reference's dtype at once: a low-precision GEMM in a full-precision program).
_GEMMS = frozenset({"linear", "matmul", "mm", "bmm", "addmm", "baddbmm", "einsum", "conv1d",
                    "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
                    "conv_transpose3d", "bilinear", "__matmul__", "scaled_dot_product_attention"})


def reduced_precision(model, inputs: list, forward_seed: int, dtype_name: str = "bfloat16",
                      copies: bool = True):
    """The outputs with every matmul-class call's floating-point operands rounded to
    ``dtype_name`` (and its result cast back): what a kernel with low-precision GEMM operands
    and a full-precision epilogue returns. None when forward runs no such call."""
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._pytree import tree_map

    low = getattr(torch, dtype_name)
    rounded = [0]

    def down(v):
        if isinstance(v, torch.Tensor) and v.dtype in (torch.float32, torch.float64):
            return v.to(low).to(v.dtype)
        return v

    class Round(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if getattr(func, "__name__", "") in _GEMMS:
                rounded[0] += 1
                args, kwargs = tree_map(down, (args, kwargs))
            return func(*args, **kwargs)

    with Round():
        out = forward(model, inputs, forward_seed, copies)
    return out if rounded[0] else None


def rounded_errors(out: list, ref: list, dtype_name: str) -> dict:
    """How far the reduced-precision answer ``out`` is from ``ref``: ``error``, the allclose
    measure (``checks.max_error``), and ``abs_errors``, each output's largest absolute
    difference (what ``checks.judge_contrast`` holds against the slack an output varying
    about zero gets, to tell whether only an offset's slack admits the answer)."""
    import torch

    worst = []
    for a, b in zip(out, ref):
        if not (b.is_floating_point() and a.shape == b.shape) or b.numel() == 0:
            worst.append(None)
            continue
        diff = 0.0
        for x, y in C._blocks64(a, b):
            d = (x - y).abs()
            diff = C._fold(torch.maximum, diff, torch.where(torch.isfinite(d), d, 0.0).max())
        worst.append(float(diff))
    return {"dtype": dtype_name, "error": C.max_error(out, ref), "abs_errors": worst}
