"""The part of an output that is not an affine function of its inputs (``contrast``'s second view).

An output ``x + 0.01 * mlp(x)`` with ``x`` of std 10 varies by 10 across inputs, but all of that
is the identity passthrough, which costs nothing to compute; the computed branch varies by 3e-3
and gets the slack ``tol * (1 + |y|)`` of the passthrough's magnitude, several percent of its own
scale. ``nonaffine_spread`` measures what is left of an output's change between two input draws
once the best affine function of the changes of its same-shaped inputs is taken out:

    min over a of  RMS(dy - sum_i a_i dx_i) / sqrt(2),    dy = y - y',  dx_i = x_i - x_i'

with slopes ``a`` shared by every element (a per-channel scale is read in ``contrast``'s slices,
each fitted on its own) and an intercept of each element's own, which the difference cancels:
identity passthroughs, scaled copies, and added constants (a bias, a positional table) all go.
What remains is the change the program computes. fp64 blocks, two passes (moments, residual),
no whole-tensor fp64 copy."""
from __future__ import annotations

import math

from .. import checks as C

# A remainder under this many ulps of the output's dtype, or hundredths of the tolerance, on its
# magnitude is rounding (an affine output stored in bf16 leaves about half an ulp; in fp32,
# whose tolerance floor is some 1e3 ulps, a hundredth of the tolerance is the higher bar)
ROUNDING = 4.0

# A fit needs this many elements per slope it fits (fewer: not fitted, the view is not taken):
# a slice of a handful of elements fitted exactly would leave no remainder at all.
MIN_PER_SLOPE = 16


def same_shaped(y, inputs: list, alt_inputs: list) -> list[tuple]:
    """The (x, x') pairs of floating-point inputs of ``y``'s shape, from the two draws."""
    pairs = []
    for x, x_alt in zip(inputs, alt_inputs):
        if (getattr(x, "is_floating_point", None) and x.is_floating_point()
                and getattr(x_alt, "shape", None) == x.shape == y.shape):
            pairs.append((x, x_alt))
    return pairs


def nonaffine_spread(y, z, pairs: list[tuple]) -> float | None:
    """The RMS over sqrt(2) of ``y - z`` (one output over two input draws) less its least-squares
    fit by the inputs' changes (``pairs``: (x, x') of ``y``'s shape, sliced alike). None when
    there is nothing to fit on, too few elements, or a non-finite value."""
    import torch

    if not pairs or y.numel() < MIN_PER_SLOPE * len(pairs):
        return None
    k = len(pairs)
    tensors = [y, z] + [t for pair in pairs for t in pair]

    def changes():
        for block in C._blocks64(*tensors):
            dy = block[0] - block[1]
            dx = torch.stack([block[2 + 2 * i] - block[3 + 2 * i] for i in range(k)])
            yield dy, dx

    gram = torch.zeros(k, k, dtype=torch.float64)
    cross = torch.zeros(k, dtype=torch.float64)
    for dy, dx in changes():
        if not (torch.isfinite(dy).all() and torch.isfinite(dx).all()):
            return None
        gram += (dx @ dx.T).cpu()
        cross += (dx @ dy).cpu()
    scale = gram.diagonal().clamp_min(1e-300)  # each input's change normalised: a zero one is 0
    norm = scale.sqrt()
    a = torch.linalg.lstsq(gram / torch.outer(norm, norm), (cross / norm).unsqueeze(1)).solution
    a = (a.squeeze(1) / norm).nan_to_num(0.0)
    square = count = 0.0
    for dy, dx in changes():
        r = dy - (a.to(dx.device) @ dx)
        square += float((r * r).sum())
        count += r.numel()
    return math.sqrt(square / count / 2.0) if count else None


def nonaffine_view(y, z, pairs: list[tuple], tol: float, magnitude: float,
                   informative: float) -> dict | None:
    """``contrast``'s measurement taken on the non-affine part: its spread (``informative``),
    the slack rtol on the output's magnitude adds beyond what an output of that spread about
    zero gets (``excess``), and their ratio. None where no affine part was found to take out
    (no same-shaped input, or the fit leaves nine tenths of the change or more: the whole
    output's view then says about the same), or where the remainder is at the level of rounding (the output is
    affine in its inputs: ``not_affine`` judges that, and a remainder of noise has no slack to
    compare with)."""
    import torch

    spread = nonaffine_spread(y, z, pairs)
    if spread is None or spread > 0.9 * informative:
        return None
    if spread <= max(0.01 * tol, ROUNDING * torch.finfo(y.dtype).eps) * max(1.0, magnitude):
        return None
    excess = tol * max(0.0, magnitude - 1.0 - spread)
    return {"informative": spread, "excess": excess, "ratio": excess / spread}
