"""The part of an output that is not an affine function of its inputs (``contrast``'s second view).

An output ``x + 0.01 * mlp(x)`` with ``x`` of std 10 varies by 10 across inputs, but all of that
is the identity passthrough, which costs nothing to compute; the computed branch varies by 3e-3
and gets the slack ``tol * (1 + |y|)`` of the passthrough's magnitude, several percent of its own
scale. ``nonaffine_spread`` measures what is left of an output's change between two input draws
once the best affine function of the changes of its same-shaped inputs is taken out:

    min over a of  RMS(dy - sum_i a_i dx_i) / sqrt(2),    dy = y - y',  dx_i = x_i - x_i'

with slopes ``a`` shared by every element and an intercept of each element's own, which the
difference cancels: identity passthroughs (of an input of the output's shape, of an integer
one cast, or of a smaller one broadcast), scaled copies, and added constants (a bias, a
positional table) all go. What remains is the change the program computes; it is held against
the slack rtol gives on the magnitude of the passthroughs (``sum_i a_i x_i``), not on the whole
output's: a computed magnitude (a LogSoftmax's log-sum-exp) is honest work whose rounding
scales with it. Whole outputs only (a slice's remainder can be constant within it). One pass
of fp64 blocks, no whole-tensor fp64 copy."""
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
    """The (x, x') pairs of inputs that reach ``y``'s shape as they are, from the two draws:
    floating-point or integer inputs of its shape (integer cells of a coarse grid refined by a
    computed offset), and smaller ones whose shape broadcasts to it, expanded (a coarse depth
    map plus 16 computed perturbations of it)."""
    import torch

    pairs = []
    for x, x_alt in zip(inputs, alt_inputs):
        if not (isinstance(x, torch.Tensor) and isinstance(x_alt, torch.Tensor)
                and x.shape == x_alt.shape and x.device == y.device
                and not x.is_complex() and x.dtype != torch.bool):
            continue
        if not x.is_floating_point() and torch.unique(x).numel() <= 2:
            continue  # a mask of zeros and ones picks what is computed; it carries nothing
        if x.shape == y.shape:
            pairs.append((x, x_alt))
        elif 1 < x.numel() < y.numel() and x.dim() <= y.dim():
            try:
                reached = tuple(torch.broadcast_shapes(x.shape, y.shape)) == tuple(y.shape)
            except RuntimeError:
                reached = False
            if reached:
                pairs.append((x.expand(y.shape), x_alt.expand(y.shape)))
    return pairs


# An input of the output's size but another shape is tried as a passthrough through a
# permutation of its dimensions after the first and a reshape (a feature map flattened into
# tokens: ``x.flatten(2).transpose(1, 2)``): the permutation whose change correlates best with
# the output's, on this many sampled elements, where that correlation reaches ``PASSTHROUGH``;
# inputs of up to ``REARRANGED_ELEMENTS`` elements and 5 dimensions (a copy of each draw is made)
SAMPLED = 1 << 16
PASSTHROUGH = 0.5
REARRANGED_ELEMENTS = 1 << 24


def rearranged(y, z, inputs: list, alt_inputs: list) -> list[tuple]:
    """(x, x') pairs of floating-point inputs of ``y``'s size in another shape, each moved into
    ``y``'s layout by the permutation (dimension 0 kept first) whose change correlates best with
    ``y``'s between the draws (``z``: the second draw's output), where it correlates enough."""
    import itertools

    import torch

    pairs = []
    n = y.numel()
    step = max(1, n // SAMPLED)
    at = torch.arange(0, n, step, device=y.device)
    dy = (y.reshape(-1)[at] - z.reshape(-1)[at]).double()
    dy = dy - dy.mean()
    for x, x_alt in zip(inputs, alt_inputs):
        if not (getattr(x, "is_floating_point", None) and x.is_floating_point()
                and getattr(x_alt, "shape", None) == x.shape and x.numel() == n
                and x.shape != y.shape and 2 <= x.dim() <= 5 and n <= REARRANGED_ELEMENTS
                and x.device == y.device and x_alt.device == y.device):
            continue
        best, chosen = PASSTHROUGH, None
        flat, flat_alt = x.reshape(-1), x_alt.reshape(-1)
        for order in itertools.permutations(range(1, x.dim())):
            dims = (0, *order)
            shape = [x.shape[d] for d in dims]
            # each sampled output position's element of ``x`` in the permuted layout
            rest, coords = at.clone(), [None] * len(dims)
            for i in range(len(dims) - 1, -1, -1):
                coords[i], rest = rest % shape[i], rest // shape[i]
            source = torch.zeros_like(at)
            for d in range(x.dim()):
                source = source * x.shape[d] + coords[dims.index(d)]
            dx = (flat[source] - flat_alt[source]).double()
            dx = dx - dx.mean()
            norm = float(dx.norm() * dy.norm())
            corr = abs(float(dx @ dy)) / norm if norm > 0 else 0.0
            if corr > best:
                best, chosen = corr, dims
        if chosen is not None:
            pairs.append((x.permute(*chosen).reshape(y.shape),
                          x_alt.permute(*chosen).reshape(y.shape)))
    return pairs


def nonaffine_spread(y, z, pairs: list[tuple]) -> tuple[float, float] | None:
    """The RMS over sqrt(2) of ``y - z`` (one output over two input draws) less its least-squares
    fit by the inputs' changes (``pairs``: (x, x') of ``y``'s shape), and the output's magnitude
    where that remainder lives: the RMS of the lesser of ``|y|`` and ``|z|`` weighted element by
    element by the remainder's square (an offset under the informative part lends it rtol's
    slack; a fill of -1e4 where a mask leaves nothing to compute lends none, however the mask
    is written). Two passes of fp64 blocks sized to the inputs' count, the residual from the
    moments (its sum of squares is ``dy.dy - 2 a.c + a.G.a``). None when there is nothing to fit
    on, too few elements, or a value or moment that is not finite."""
    import torch

    if not pairs or y.numel() < MIN_PER_SLOPE * len(pairs):
        return None
    k = len(pairs)
    tensors = [y, z] + [t for pair in pairs for t in pair]
    # the moments stay on the output's device until both passes end (``checks._fold``: a read
    # a block waits for a shared GPU)
    gram = torch.zeros(k, k, dtype=torch.float64, device=y.device)  # of the changes
    cross = torch.zeros(k, dtype=torch.float64, device=y.device)
    square = torch.zeros((), dtype=torch.float64, device=y.device)
    finite = torch.ones((), dtype=torch.bool, device=y.device)
    count = 0
    # blocks of an eighth of the output at most (the probe's memory estimate holds about one
    # fp64 copy of an output for its checks), dot products in place of stacked copies
    chunk = max(1 << 12, min(C.CHUNK // (2 + 2 * k), -(-y.numel() // 8)))
    for block in C._blocks64(*tensors, chunk=chunk):
        dy = block[0] - block[1]
        dx = [block[2 + 2 * i] - block[3 + 2 * i] for i in range(k)]
        for d in (dy, *dx):
            finite &= torch.isfinite(d).all()
        for i in range(k):
            cross[i] += torch.dot(dx[i], dy)
            for j in range(i, k):
                gram[i, j] += torch.dot(dx[i], dx[j])
        square += torch.dot(dy, dy)
        count += dy.numel()
        del block, dy, dx
    if not bool(finite):
        return None
    gram, cross, square = gram.cpu(), cross.cpu(), float(square)
    gram = torch.triu(gram) + torch.triu(gram, 1).T
    if not (count and torch.isfinite(gram).all() and torch.isfinite(cross).all()
            and math.isfinite(square)):
        return None
    scale = gram.diagonal().clamp_min(1e-300)  # each input's change normalised: a zero one is 0
    norm = scale.sqrt()
    try:
        a = torch.linalg.lstsq(gram / torch.outer(norm, norm), (cross / norm).unsqueeze(1)).solution
    except RuntimeError:  # a system the solver refuses: no view
        return None
    a = (a.squeeze(1) / norm).nan_to_num(0.0)
    residual = square - 2.0 * float(a @ cross) + float(a @ gram @ a)
    # the output's magnitude where the remainder lives: y's square weighted by the remainder's
    weighted = torch.zeros((), dtype=torch.float64, device=y.device)
    weights = torch.zeros((), dtype=torch.float64, device=y.device)
    slopes = [float(v) for v in a]
    for block in C._blocks64(*tensors, chunk=chunk):
        rest = block[0] - block[1]
        for i in range(k):
            rest -= slopes[i] * (block[2 + 2 * i] - block[3 + 2 * i])
        rest.square_()
        # the magnitude both draws carry there (an element a mask fills in one draw only is
        # filled in neither's informative part)
        weighted += torch.dot(rest, torch.minimum(block[0].square(), block[1].square()))
        weights += rest.sum()
        del block, rest
    weighted, weights = float(weighted), float(weights)
    if not (math.isfinite(weighted) and math.isfinite(weights)):
        return None
    carried = math.sqrt(weighted / weights) if weights > 0 else 0.0
    return math.sqrt(max(0.0, residual) / count / 2.0), carried


# An input sharing the output's first dimension (its rows: agents, tokens, samples) is also
# tried as a linear map of its rows onto the output's, where no input reaches the output
# element by element (a constant-velocity extrapolation of 10 past positions to 30 future
# ones): the output read as that many rows in whatever layout (a flattened trajectory too),
# each such input fitted alone and those of one row count together, where their rows hold at
# most ``ROW_FEATURES`` elements, the rows number ``ROWS_PER_FEATURE`` per fitted feature (the
# remainder is scaled by rows / (rows - features), the fit's own degrees of freedom), and the
# output and the inputs' rows hold at most ``REARRANGED_ELEMENTS`` elements each (their changes
# are held in fp64), read from shapes first; the fit that leaves the least is kept. A change
# every row shares (a small input broadcast over them) is fitted beside the map
ROW_FEATURES = 256
ROWS_PER_FEATURE = 4


def _row_blocks(y, z, members: list, rows: int):
    """(dy, dx) fp64 blocks of whole rows: the output's change (rows, k) and the changes of the
    ``members``' rows beside a column of ones (rows, f + 1), an eighth of ``CHUNK`` at most."""
    import torch

    width = y.numel() // rows + sum(x[0].numel() for x, _ in members) + 1
    step = max(1, C.CHUNK // 8 // width)
    flat = [(t.reshape(rows, -1), u.reshape(rows, -1)) for t, u in [(y, z), *members]]
    for start in range(0, rows, step):
        n = min(step, rows - start)
        changes = [t.narrow(0, start, n).double() - u.narrow(0, start, n).double()
                   for t, u in flat]
        ones = torch.ones(n, 1, dtype=torch.float64, device=y.device)
        yield start, n, changes[0], torch.cat([*changes[1:], ones], 1)


def _solve(gram, cross):
    """The least-squares map from the normal equations (columns scaled to unit norm first);
    None where the solver refuses them."""
    import torch

    norm = gram.diagonal().clamp_min(1e-300).sqrt()
    try:
        a = torch.linalg.lstsq(gram / torch.outer(norm, norm), cross / norm[:, None]).solution
    except RuntimeError:  # a system the solver refuses: no view
        return None
    return (a / norm[:, None]).nan_to_num(0.0)


def row_map_spread(y, z, inputs: list, alt_inputs: list) -> tuple[float, float] | None:
    """``nonaffine_spread``'s numbers with the output's change fitted row by row as a linear
    map (one matrix for every row) of the changes of the floating-point inputs' rows (inputs
    whose first dimension divides ``y``'s elements; an intercept of each element's own, which
    the difference cancels). None where no input qualifies (``ROW_FEATURES``) or a value is not
    finite. Normal equations summed over fp64 blocks of rows and solved on the host: no
    whole-output fp64 copy."""
    import torch

    if y.dim() < 1 or y.numel() > REARRANGED_ELEMENTS:
        return None
    # chosen by their shapes alone: nothing is computed from an input that does not qualify
    chosen = [(x, x_alt) for x, x_alt in zip(inputs, alt_inputs)
              if isinstance(x, torch.Tensor) and isinstance(x_alt, torch.Tensor)
              and x.is_floating_point() and x.shape == x_alt.shape and x.dim() >= 2
              and x.shape[0] >= 2 and y.numel() % x.shape[0] == 0
              and x.device == y.device and x_alt.device == y.device
              and x[0].numel() <= ROW_FEATURES
              and x.shape[0] > ROWS_PER_FEATURE * (x[0].numel() + 1)
              and x.numel() <= REARRANGED_ELEMENTS]
    groups: dict[int, list] = {}
    for x, x_alt in chosen:
        groups.setdefault(x.shape[0], []).append((x, x_alt))
    best = None  # (what the fit leaves, rows, members, the columns fitted, the map)
    for rows, members in groups.items():
        # the normal equations of every member's columns and the ones at once; each fit
        # (a member alone, or all of them) takes its rows and columns of them
        gram = cross = None
        square, finite = 0.0, True  # read once the blocks are summed (on the device)
        for _, _, dy, dx in _row_blocks(y, z, members, rows):
            finite = torch.isfinite(dy).all() & torch.isfinite(dx).all() & finite
            g, c = dx.T @ dx, dx.T @ dy
            gram, cross = (g, c) if gram is None else (gram + g, cross + c)
            square = dy.square().sum() + square
        if not bool(finite):
            return None
        gram, cross, square = gram.cpu(), cross.cpu(), float(square)
        widths = [x[0].numel() for x, _ in members]
        edges = [sum(widths[:i]) for i in range(len(widths) + 1)]
        ones = edges[-1]
        tries = [list(range(edges[i], edges[i + 1])) + [ones] for i in range(len(members))]
        if len(members) > 1 and ones <= ROW_FEATURES and rows > ROWS_PER_FEATURE * (ones + 1):
            tries.append(list(range(ones + 1)))
        for columns in tries:
            at = torch.tensor(columns)
            g, c = gram[at][:, at], cross[at]
            a = _solve(g, c)
            if a is None:
                continue
            left = square - 2.0 * float((a * c).sum()) + float((a * (g @ a)).sum())
            left = max(0.0, left) * rows / (rows - len(columns))
            if math.isfinite(left) and (best is None or left < best[0]):
                best = (left, rows, members, at, a)
    if best is None:
        return None
    left, rows, members, at, a = best
    at, a = at.to(y.device), a.to(y.device)
    weighted = weights = 0.0
    low_y, low_z = y.reshape(rows, -1), z.reshape(rows, -1)
    for start, n, dy, dx in _row_blocks(y, z, members, rows):
        rest = (dy - dx[:, at] @ a).square_()
        low = torch.minimum(low_y.narrow(0, start, n).double().square(),
                            low_z.narrow(0, start, n).double().square())
        weighted = (rest * low).sum() + weighted
        weights = rest.sum() + weights
    weighted, weights = float(weighted), float(weights)
    if not (math.isfinite(weighted) and math.isfinite(weights)):
        return None
    carried = math.sqrt(weighted / weights) if weights > 0 else 0.0
    return math.sqrt(left / y.numel() / 2.0), carried


def nonaffine_view(y, z, pairs: list[tuple], tol: float, magnitude: float,
                   informative: float, measured: tuple | None = None) -> dict | None:
    """``contrast``'s measurement taken on the non-affine part: its spread (``informative``),
    the slack rtol on the affine part's magnitude (``magnitude``, the RMS of what the fitted
    passthroughs carry) adds beyond what an output of that spread about zero gets
    (``excess``), and their ratio. A magnitude the program computes (a LogSoftmax's row
    log-sum-exp, near 10 and nearly the same on every draw) is not a passthrough's: its slack
    is the honest rounding of a computed value. None where no affine part was found to take
    out (no same-shaped input, or the fit leaves nine tenths of the change or more: the whole
    output's view then says about the same), or where the remainder is at the level of rounding
    of the output's magnitude (``magnitude``; the output is affine in its inputs: ``not_affine``
    judges that, and a remainder of noise has no slack to compare with)."""
    import torch

    try:
        measured = measured or nonaffine_spread(y, z, pairs)
    except RuntimeError:  # a measurement that cannot be taken is no view
        return None
    if measured is None:
        return None
    spread, affine = measured
    if spread > 0.9 * informative:
        return None
    if spread <= max(0.01 * tol, ROUNDING * torch.finfo(y.dtype).eps) * max(1.0, magnitude):
        return None
    # an honest output rounds at its own magnitude: in half precision that rounding (a few
    # ulps of the passthrough the branch is added to) is most of the tolerance, not slack
    rounding = ROUNDING * float(torch.finfo(y.dtype).eps)
    excess = max(0.0, tol - rounding) * max(0.0, affine - 1.0 - spread)
    return {"informative": spread, "magnitude": affine, "excess": excess,
            "ratio": excess / spread}
