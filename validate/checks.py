"""Check functions: measurements on output tensors (worker side) and verdicts on numbers (parent).

Two halves, both pure:

* measurement functions take tensors and return plain numbers (``max_error``,
  ``mismatch_fraction``, ``zero_fraction``, ``affine_residual`` ...). The probe worker calls them,
  so this module imports only torch and the standard library, and torch only inside functions.
* ``judge`` takes the probe's measurements (a dict of numbers) and a thresholds dict and returns
  ``{name: {"passed": True|False|None, "value": ..., "detail": str}}``. ``None`` means the check
  was skipped (not applicable, or only meaningful on another device), which is never a pass.
  The verdicts, the tolerance calibration and ``compute_ops`` live in validate/verdicts.py and
  are re-exported here.

Error measure. Every comparison uses the mixed error ``|a - b| / (1 + |b|)`` so that a single
tolerance ``t`` means exactly ``allclose(a, b, atol=t, rtol=t)``: ``|a-b| <= t + t|b|``.
"""
from __future__ import annotations

import hashlib
import math

from kernelmill.core.taxonomy import (  # noqa: F401 — re-exported for the probe
    AFFINE_OPS,
    DATA_MOVEMENT_OPS,
    ELEMENTWISE_OPS,
    moves_data_only,
    op_base,
)
from kernelmill.validate.check_terms import TOLERANCE_BOUNDS, check  # noqa: F401 — re-exported
from kernelmill.validate.verdicts import (  # noqa: F401 — re-exported
    DEFAULT_THRESHOLDS,
    affine_by_construction,
    calibrate_tolerance,
    compute_ops,
    judge,
    judge_buffers,
    judge_sensitivity,
    summarize,
)
from kernelmill.validate.verdicts_realcode import *  # noqa: F403 — re-exported (its __all__)
from kernelmill.validate.verdicts_timing import *  # noqa: F403 — re-exported (its __all__)

# ---------------------------------------------------------------- measurements (worker side)

def _as64(t):
    import torch

    if t.dtype == torch.bool:
        t = t.to(torch.uint8)
    if t.is_complex():
        t = torch.view_as_real(t)
    return t.to(torch.float64)


# Statistics run over blocks of at most this many elements, converted to fp64 one block at a time:
# a whole-tensor fp64 copy of a KernelBench level-1 output (1.6e9 elements) is 12.8 GB, and the
# probe used to hold several at once.
CHUNK = 1 << 24


def _flat(t):
    t = t.detach()
    if t.is_complex():
        t = _real_view(t)
    return t.reshape(-1)


def _real_view(t):
    import torch

    return torch.view_as_real(t)


def _blocks(*tensors, chunk: int | None = None):
    """Aligned flat slices of same-shaped tensors, ``chunk`` (default ``CHUNK``) elements at a
    time: views, or where a tensor cannot be viewed flat (an input expanded to the output's
    shape, a transpose) a copy of each block alone, taken along its leading dimensions."""
    chunk = chunk or CHUNK
    views = [_real_view(t.detach()) if t.is_complex() else t.detach() for t in tensors]
    if len({tuple(t.shape) for t in views}) == 1 and \
            not all(_flat_view(t) for t in views):
        yield from _row_blocks(views, chunk)
        return
    flats = [_flat(t) for t in tensors]
    n = flats[0].numel()
    for start in range(0, n, chunk):
        yield tuple(f[start:start + chunk] for f in flats)


def _flat_view(t) -> bool:
    """Whether ``t.reshape(-1)`` is a view (no copy)."""
    try:
        t.view(-1)
    except RuntimeError:
        return False
    return True


def _row_blocks(tensors: list, chunk: int):
    """Flat blocks of same-shaped tensors in row-major order, each of at most ``chunk``
    elements (or one innermost row), cut along the leading dimension and within a row too
    large for a block along the next."""
    n = tensors[0].numel()
    if not n:
        return
    if n <= chunk or tensors[0].dim() == 0:
        yield tuple(t.reshape(-1) for t in tensors)
        return
    rows = tensors[0].shape[0]
    per = n // rows
    step = max(1, chunk // per)
    for i in range(0, rows, step):
        part = [t[i:i + step] for t in tensors]
        if per > chunk and part[0].dim() > 1:
            yield from _row_blocks([p[0] for p in part], chunk)
        else:
            yield tuple(p.reshape(-1) for p in part)


def _blocks64(*tensors, chunk: int | None = None):
    """``_blocks`` converted to fp64, one block at a time."""
    for block in _blocks(*tensors, chunk=chunk):
        yield tuple(_as64(t) for t in block)


def bitwise_equal(a: list, b: list) -> bool:
    """Equal shapes, dtypes and values, NaNs in the same places counting as equal."""
    import torch

    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x.shape != y.shape or x.dtype != y.dtype:
            return False
        same = True
        for xs, ys in _blocks(x, y):
            if xs.is_floating_point():  # equal, or NaN on both sides
                same = ((xs == ys) | (torch.isnan(xs) & torch.isnan(ys))).all() & same
            else:
                same = (xs == ys).all() & same
        if not bool(same):
            return False
    return True


def shapes_equal(a: list, b: list) -> bool:
    """Same count, shapes and complexness (a complex tensor's values are read as twice the
    real numbers: a real one of its shape is another output, not a comparable one)."""
    return len(a) == len(b) and all(x.shape == y.shape and x.is_complex() == y.is_complex()
                                    for x, y in zip(a, b))


def _mixed_error(x64, y64):
    """``|x-y| / (1+|y|)`` as a new tensor, with two temporaries at most (lean on memory)."""
    import torch

    err = torch.sub(x64, y64).abs_()
    den = y64.abs().add_(1.0)
    return err.div_(den)


# The statistics below run block by block and keep their running counts, sums and extremes on
# the tensors' device, read once at the end: a read per block waits for the GPU, and a probe
# sharing it with a dozen others waited 10-20 ms a read (a 6.4 GB output is 100 blocks, and a
# probe's degeneracy stage read it four times: 6.5 s of an H200 KernelBench level-1 probe).


def _fold(op, running, value):
    """``op`` (``torch.maximum`` or ``minimum``) of a running statistic (a number before the
    first block) and a block's 0-d ``value``, kept on the block's device."""
    import torch

    return op(value, torch.as_tensor(running, dtype=value.dtype, device=value.device))


def all_finite(outputs: list) -> bool:
    """No NaN or infinity in any floating-point output (block by block: ``isfinite`` of a whole
    float32 tensor holds an absolute value and three masks, 1.75 times the tensor)."""
    import torch

    ok = True
    for t in outputs:
        if t.is_floating_point():
            for (block,) in _blocks(t):
                ok = torch.isfinite(block).all() & ok
    return bool(ok)


def max_error(a: list, b: list) -> float:
    """max |a-b| / (1+|b|) over all outputs; inf when shapes differ or only one side is NaN.
    Computed first in the pair's working precision (``_working_pair``: a third of the fp64
    path's memory traffic on a 6.4 GB output, and a few rounding errors of relative size 1e-7
    in the error itself); where that reads a NaN or an infinity (a NaN or an infinity in the
    outputs, or an fp32 difference that overflowed), again exactly in fp64."""
    if not shapes_equal(a, b):
        return math.inf
    worst = _fast_max_error(a, b)
    return worst if math.isfinite(worst) else _exact_max_error(a, b)


def _working_dtype(*tensors):
    """fp64 where any of ``tensors`` is fp64 or an integer wider than fp32's mantissa holds,
    else fp32."""
    import torch

    wide = (torch.float64, torch.complex128, torch.int64, torch.int32, torch.uint32, torch.uint64)
    return torch.float64 if any(t.dtype in wide for t in tensors) else torch.float32


def _working_pair(x, y):
    """Two aligned blocks in the dtype their error is computed in: fp64 where either is fp64 or
    an integer wider than fp32's mantissa holds (an fp64 or fp32 block left to the ops' type
    promotion, no copy), else fp32; half-precision blocks are fp32 either way (``1 + |y|``
    is computed in ``y``'s own dtype)."""
    import torch

    work = _working_dtype(x, y)

    def cast(t):
        if t.dtype in (torch.float64, torch.float32):
            return t
        return t.to(work if not t.is_floating_point() else torch.float32)

    return cast(x), cast(y)


def _working_error(x, y):
    """``|x-y| / (1+|y|)`` of two aligned blocks in their working precision (NaN where either
    is NaN, or both are the same infinity)."""
    import torch

    x, y = _working_pair(x, y)
    err = torch.sub(x, y).abs_()
    return err.div_(y.abs().add_(1.0))


def _fast_max_error(a: list, b: list) -> float:
    import torch

    worst = 0.0
    for x, y in zip(a, b):
        for bx, by in _blocks(x, y):
            if bx.numel():  # folded in fp64: an fp32 output after an fp64 one rounds nothing
                worst = _fold(torch.maximum, worst,
                              _working_error(bx, by).max().to(torch.float64))
    return float(worst)


def _exact_max_error(a: list, b: list) -> float:
    import torch

    worst, apart = 0.0, False  # ``apart``: a NaN on one side only
    for x, y in zip(a, b):
        for x64, y64 in _blocks64(x, y):
            nx = torch.isnan(x64)
            apart = (nx != torch.isnan(y64)).any() | apart
            same = nx | (torch.isinf(x64) & (x64 == y64))  # both NaN, or the same infinity
            err = _mixed_error(x64, y64).masked_fill_(same, 0.0)
            if err.numel():
                worst = _fold(torch.maximum, worst, err.nan_to_num_(nan=math.inf).max())
    return math.inf if bool(apart) else float(worst)


def mismatch_fraction(a: list, b: list, tol: float, margin: float = 1.0) -> float:
    """Fraction of elements where ``|a-b| > margin * tol * (1+|b|)`` (1.0 if shapes differ;
    a NaN on either side counts). In the pair's working precision (``max_error``): an fp32
    difference that overflows is over any bound under ``MISMATCH_EXACT_BOUND``, as its exact
    value (1 or more) is."""
    if not shapes_equal(a, b):
        return 1.0
    exact = margin * tol >= MISMATCH_EXACT_BOUND
    total = bad = 0
    for x, y in zip(a, b):
        for bx, by in (_blocks64(x, y) if exact else _blocks(x, y)):
            err = _working_error(bx, by).nan_to_num_(nan=math.inf)
            bad = (err > margin * tol).sum() + bad
            total += err.numel()
    return float(bad) / total if total else 0.0


# ``mismatch_fraction`` bounds from which the error is computed in fp64 (an fp32 difference
# that overflowed to infinity is then not certainly over the bound)
MISMATCH_EXACT_BOUND = 0.5


def zero_fraction(outputs: list, tol: float) -> float:
    """Fraction of elements an all-zeros answer gets right at tolerance ``tol``."""
    total = hit = 0
    for y in outputs:
        for (y64,) in _blocks64(y):
            y64 = y64.abs()
            hit = (y64 * (1.0 - tol) <= tol).sum() + hit
            total += y64.numel()
    return float(hit) / total if total else 1.0


def _sample(flat, most: int | None = None):
    """Up to ``most`` (default ``CHUNK``) evenly strided elements of a flat tensor (all of them
    when it is small)."""
    most = most or CHUNK
    step = max(1, -(-flat.numel() // most))
    return flat[::step]


def constant_fraction(outputs: list, tol: float) -> float:
    """Fraction of elements the best single constant (the median, per output; of an even
    sample of at most ``CHUNK`` elements for larger outputs) gets right."""
    import torch

    total = hit = 0
    for y in outputs:
        sample = _as64(_sample(_flat(y)))
        sample = sample[~torch.isnan(sample)]
        if sample.numel() == 0:
            continue
        c = sample.median()
        for (y64,) in _blocks64(y):
            # a NaN element is no hit (the comparison is false) and not counted
            hit = ((c - y64).abs() <= tol * (1.0 + y64.abs())).sum() + hit
            total = (~torch.isnan(y64)).sum() + total
    total = float(total)
    return float(hit) / total if total else 1.0


def _channel_blocks(t, channel_dim: int | None, dtype=None):
    """Blocks of ``t`` in ``dtype`` (default fp64) as (rows, channels, k) tensors: one channel
    when ``channel_dim`` is None, else one per index along it; blocks of whole slices along dim
    0 (or flat blocks), a slice larger than ``CHUNK`` cut along what follows the channels. The
    statistics reduce over dims 0 and 2."""
    import torch

    def cast(block):
        if dtype is None or dtype == torch.float64:
            return _as64(block)
        if block.is_complex():
            block = torch.view_as_real(block)
        return block if block.dtype == dtype else block.to(dtype)

    if channel_dim is None:
        for (block,) in _blocks(t):
            yield cast(block).reshape(1, 1, -1)
        return
    channels = t.shape[channel_dim]
    slices = [t] if channel_dim == 0 else None
    if slices is None:
        per = max(1, t[0].numel())
        step = max(1, CHUNK // per)
        slices = (t.narrow(0, start, min(step, t.shape[0] - start))
                  for start in range(0, t.shape[0], step))
    for part in slices:
        lead = math.prod(part.shape[:channel_dim]) if channel_dim else 1
        view = part.reshape(lead, channels, -1)
        cols = max(1, CHUNK // max(1, lead * channels))
        for start in range(0, view.shape[2], cols):
            yield cast(view[:, :, start:start + cols])


def affine_residual(xs: list, ys: list, channel_dim: int | None = None) -> float:
    """Max mixed error of the least-squares fit ``y ≈ a*x + b`` shared by all (x, y) pairs.

    With ``channel_dim`` the fit has its own ``a, b`` per channel (per index along that dim).
    Pairs come from different input draws, so a fit that depends on one draw's statistics
    (normalisation layers) does not pass as affine (``affine_residuals``)."""
    whole, per_channel = affine_residuals(xs, ys, channel_dim)
    return whole if channel_dim is None else per_channel


# An fp32 fit's residual is taken again in fp64 where fp32's rounding of its prediction could
# move it by ``REFIT_ROUNDING`` or more (a hundredth of fp32's least tolerance) while it reads
# under ``REFIT_BELOW`` (near any tolerance a problem is graded at: fp32's cap is 5e-2), or
# where it is not finite: a prediction whose terms cancel (an output crossing zero at a slope of
# 1e4 read 1.2e-4 in fp32, 3e-6 in fp64), or an overflow of its squares. The rounding's scale
# is read beside the residual: 4 roundings of the prediction's terms against ``1 + |y|``.
REFIT_BELOW = 0.1
REFIT_ROUNDING = 1e-6


def affine_residuals(xs: list, ys: list, channel_dim: int | None = None,
                     exact: bool = False) -> tuple:
    """(whole, per channel): ``affine_residual``'s fit shared by every element and, with
    ``channel_dim``, the fit of each channel's own (None without). Two passes over blocks for
    both: moments about a shift of each channel's own (its first block's mean, so an offset
    costs no precision), then the residuals; no whole-tensor copy. Blocks in their working
    precision (``_working_pair``: fp32 unless a side is fp64 or a wide integer; ``exact``:
    fp64), products summed in fp64; an fp32 residual its rounding could decide, or one not
    finite, is taken again in fp64 (``REFIT_BELOW``)."""
    import torch

    work = torch.float64 if exact else _working_dtype(*xs, *ys)

    def pairs():
        for x, y in zip(xs, ys):
            yield from zip(_channel_blocks(x, channel_dim, work),
                           _channel_blocks(y, channel_dim, work))

    def total(t):  # per-channel fp64 sum of a (rows, channels, k) block, shaped (1, channels, 1)
        return t.sum(dim=(0, 2), keepdim=True, dtype=torch.float64)

    n, finite, shift = 0, True, None
    sx = sy = sxx = sxy = 0.0
    for bx, by in pairs():
        if shift is None:  # in the blocks' dtype: the moments are about this shift as held
            shift = ((total(bx) / max(1, bx.shape[0] * bx.shape[2])).to(work),
                     (total(by) / max(1, by.shape[0] * by.shape[2])).to(work))
        finite = torch.isfinite(bx).all() & torch.isfinite(by).all() & finite
        n += bx.shape[0] * bx.shape[2]
        dx, dy = torch.sub(bx, shift[0]), torch.sub(by, shift[1])
        sx, sy = sx + total(dx), sy + total(dy)
        sxy = sxy + total(dy.mul_(dx))
        sxx = sxx + total(dx.square_())
    if not bool(finite):
        return math.inf, (None if channel_dim is None else math.inf)
    if n == 0:
        return 0.0, (None if channel_dim is None else 0.0)

    def fit(sx, sy, sxx, sxy, shift_x, shift_y, count):
        """(mean of x, mean of y, slope) from moments about the shifts, in the blocks'
        dtype."""
        var = sxx - sx * sx / count
        cov = sxy - sx * sy / count
        a = torch.where(var > 0, cov / var.clamp_min(1e-300), torch.zeros_like(var))
        return ((shift_x + sx / count).to(work), (shift_y + sy / count).to(work), a.to(work))

    shift = (shift[0].to(torch.float64), shift[1].to(torch.float64))
    fits = [fit(sx, sy, sxx, sxy, shift[0], shift[1], n)]  # per channel (one when None)
    if channel_dim is not None:
        # the whole tensor's moments from the channels', moved to one shift (their mean)
        channels = sx.numel()
        cx, cy = shift[0].mean(), shift[1].mean()
        ex, ey = shift[0] - cx, shift[1] - cy
        fits.insert(0, fit(sx.sum() + n * ex.sum(), sy.sum() + n * ey.sum(),
                           (sxx + 2 * ex * sx + n * ex * ex).sum(),
                           (sxy + ex * sy + ey * sx + n * ex * ey).sum(), cx, cy, n * channels))
    worst = [0.0] * len(fits)
    reach = [0.0] * len(fits)  # the prediction's terms against ``1 + |y|``: its rounding's scale
    rounded = work != torch.float64
    for bx, by in pairs():
        for i, (mx, my, a) in enumerate(fits):
            part = torch.sub(bx, mx).mul_(a)
            if rounded and part.numel():
                reach[i] = _fold(torch.maximum, reach[i], part.abs().add_(my.abs()).div_(
                    by.abs().add(1.0)).max())
            error = _working_error(part.add_(my), by)
            if error.numel():
                worst[i] = _fold(torch.maximum, worst[i], error.max())
    worst = [float(w) for w in worst]
    if rounded:
        bound = [2 * torch.finfo(work).eps * (float(r) + 1.0) for r in reach]
        if not all(math.isfinite(w) and math.isfinite(b) and (
                b < REFIT_ROUNDING or w >= REFIT_BELOW + b) for w, b in zip(worst, bound)):
            return affine_residuals(xs, ys, channel_dim, exact=True)
    worst = [math.inf if math.isnan(w) else w for w in worst]  # an overflow: no fit
    return (worst[0], None) if channel_dim is None else (worst[0], worst[1])


def _device_fingerprint(t) -> bytes:
    """Per block of ``CHUNK`` words, two wrapping int64 sums of a GPU tensor's 32-bit words, one
    of them weighted by an odd hash of each word's index in its block (``_word_weights``, made
    once for every block of the tensor: computing them was most of a fingerprint's memory
    traffic): any change of any word changes its block's (a determinism check, not a
    cryptographic hash), computed on the device (hashing a 6.4 GB output on the host took
    15 s)."""
    import torch

    flat = t.detach().contiguous().reshape(-1)
    words = flat.view(torch.uint8)
    if words.numel() % 4 == 0:
        words = words.view(torch.int32)
    sums, weights = [], None
    for start in range(0, words.numel(), CHUNK):  # two int64 temporaries of a block at most
        block = words[start:start + CHUNK]
        if weights is None:
            weights = _word_weights(block.numel(), block.device)
        sums.append(torch.stack([block.sum(dtype=torch.int64),
                                 torch.mul(block, weights[:block.numel()]).sum()]))
    if not sums:
        return b""
    return torch.stack(sums).cpu().numpy().tobytes()


def _word_weights(n: int, device):
    """Odd int64 hashes of the indices 0..n-1 on ``device``."""
    import torch

    index = torch.arange(n, device=device, dtype=torch.int64)
    high = index >> 29
    return index.mul_(-7046029254386353131).bitwise_xor_(high).bitwise_or_(1)


def fingerprints(values: list) -> list[bytes | None]:
    """``_device_fingerprint`` of each tensor of ``values`` on the tensor's own device (None for
    other values and for tensors whose bytes cannot be read so, a sparse one say): telling
    whether a forward wrote into its inputs without keeping a copy of them."""
    import torch

    def one(v):
        if not isinstance(v, torch.Tensor):
            return None
        try:
            return _device_fingerprint(v)
        except (RuntimeError, TypeError, NotImplementedError):
            return None

    return [one(v) for v in values]


def output_digest(outputs: list, sample: int = 2048) -> dict:
    """A hash of the outputs' bytes plus a value sample (``sample`` elements evenly spaced over
    each output), to compare runs across processes (sha256 of the bytes on the host; of
    ``_device_fingerprint`` for GPU tensors)."""
    import torch

    h = hashlib.sha256()
    values: list[list[float]] = []
    for t in outputs:
        t = t.detach()
        h.update(str((tuple(t.shape), str(t.dtype))).encode())
        if t.is_cuda:
            h.update(_device_fingerprint(t))
        elif t.numel():
            h.update(t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
        flat = _flat(t)
        # spread over the whole output: a difference confined to its later part still shows
        step = max(1, -(-flat.numel() // sample))
        values.append(_as64(flat[::step][:sample].cpu()).tolist())
    return {"sha256": h.hexdigest(), "sample": values,
            "shapes": [list(t.shape) for t in outputs]}


def digest_error(a: dict, b: dict) -> float:
    """Max mixed error between two digests' value samples (0 when the hashes match)."""
    if a["sha256"] == b["sha256"]:
        return 0.0
    if a["shapes"] != b["shapes"]:
        return math.inf
    worst = 0.0
    for xs, ys in zip(a["sample"], b["sample"]):
        for x, y in zip(xs, ys):
            if math.isnan(x) and math.isnan(y):
                continue
            err = abs(x - y) / (1.0 + abs(y))
            if math.isnan(err):
                return math.inf
            worst = max(worst, err)
    return worst


def output_stats(outputs: list, tol: float) -> list[dict]:
    """Summary statistics of each output (for the record and behavioural dedup), over fp64
    blocks (two passes: the mean, then the spread about it)."""
    import torch

    stats = []
    for y in outputs:
        count = total = absolute = 0
        low, high = math.inf, -math.inf
        for (y64,) in _blocks64(y):
            finite = torch.isfinite(y64)
            kept = torch.where(finite, y64, 0.0)
            count = finite.sum() + count
            total = kept.sum() + total
            absolute = kept.abs().sum() + absolute
            if y64.numel():
                low = _fold(torch.minimum, low, torch.where(finite, y64, math.inf).min())
                high = _fold(torch.maximum, high, torch.where(finite, y64, -math.inf).max())
        count, total, absolute = int(count), float(total), float(absolute)
        low, high = float(low), float(high)
        numel = _flat(y).numel()
        entry = {"shape": list(y.shape), "dtype": str(y.dtype).replace("torch.", ""),
                 "numel": y.numel(), "finite_fraction": count / max(1, numel)}
        if count:
            mean = total / count
            spread = 0.0
            for (y64,) in _blocks64(y):
                spread = torch.where(torch.isfinite(y64), y64 - mean, 0.0).square().sum() + \
                    spread
            spread = float(spread)
            entry.update(mean=mean, std=math.sqrt(spread / (count - 1)) if count > 1 else 0.0,
                         min=low, max=high, abs_mean=absolute / count)
        entry["zero_fraction"] = zero_fraction([y], tol)
        entry["head"] = [round(v, 6) for v in _as64(_flat(y)[:8]).tolist()]
        stats.append(entry)
    return stats
