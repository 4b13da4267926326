"""Outputs graded exactly: ``exact_outputs`` (integer and boolean outputs under honest float
noise and another thread count, float outputs that jump under it where the forward decides from
float values, and outputs that follow the order among ties). Writes whose winner is undefined
are ``writes.duplicate_writes``."""
from __future__ import annotations

import itertools
import math
import weakref

from .. import checks as C
from .common import forward
from .pools import PoolPicks, is_pool, pinned, returns_picks

# Ops whose result carries an honest kernel's rounding: matmul-class work (torch's FLOP
# formulas) and reductions, whose error follows the magnitude of what they sum, not of the result.
REDUCTIONS = frozenset({"sum", "mean", "var", "std", "var_mean", "std_mean", "norm",
                        "linalg_vector_norm", "logsumexp", "cumsum", "prod", "_softmax",
                        "_log_softmax", "native_layer_norm", "native_group_norm",
                        "native_batch_norm", "_native_batch_norm_legit",
                        "_native_batch_norm_legit_no_training", "_fused_rms_norm"})
# Selections whose order among exact ties is left to the implementation (argmax and argmin, and
# max/min over a dim, return the first of tied values: defined).
UNORDERED_SELECTIONS = frozenset({"topk", "sort", "kthvalue", "mode", "median", "nanmedian",
                                  "msort"})


# Elementwise functions with jumps: their float result changes by a step where the argument
# crosses a threshold (a sign hash, rounding), as an integer result of a comparison does.
DISCONTINUOUS = frozenset({"sign", "sgn", "round", "floor", "ceil", "trunc", "frac", "fmod",
                           "remainder", "heaviside", "floor_divide", "histc", "histogram",
                           "histogramdd", "threshold", "hardshrink", "copysign",
                           "_fused_moving_avg_obs_fq_helper",
                           # a phase jumps by 2 pi across its branch cut (the negative reals)
                           "angle", "atan2", "arctan2"})
# Functions of a complex value with a branch cut along the negative reals (the phase inside
# them): discontinuous where their argument is complex
BRANCH_CUTS = frozenset({"log", "log2", "log10", "log1p", "sqrt", "rsqrt", "pow", "acos",
                         "asin", "atan", "acosh", "asinh", "atanh"})
# and every fake quantizer (per tensor, per channel, learnable, with or without its mask):
# rounding to a grid
FAKE_QUANTIZE = "fake_quantize"


def _discontinuous(name: str, args: tuple = (), kwargs: dict | None = None) -> bool:
    """Does this call's float result step where its argument crosses a threshold? The table,
    any fake quantizer, a division that rounds (``rounding_mode``), a cast to an 8-bit float
    (a 6-12% grid); a threshold that replaces with its own threshold value, and a hard shrink
    of zero, are continuous."""
    import torch

    kwargs = kwargs or {}
    if name == "threshold" and len(args) > 2 and args[1] == args[2]:
        return False
    if name == "hardshrink" and len(args) > 1 and args[1] == 0:
        return False
    if name in ("div", "div_") and (kwargs.get("rounding_mode") is not None or (
            len(args) > 2 and isinstance(args[2], str))):
        return True
    if name == "_to_copy" and args and isinstance(args[0], torch.Tensor) and \
            args[0].is_floating_point():
        dtype = kwargs.get("dtype")
        if dtype is not None and dtype.is_floating_point and dtype.itemsize == 1:
            return True
    if name in ("add", "add_", "sub", "sub_", "rsub") and _rounds_by_magnitude(args, kwargs):
        return True
    if name in BRANCH_CUTS and args and isinstance(args[0], torch.Tensor) and \
            args[0].is_complex():
        return True
    return name in DISCONTINUOUS or FAKE_QUANTIZE in name


# A constant added to a float tensor whose unit in the last place is at least this share of
# the tensor's largest magnitude rounds it to that grid (``(x + 12582912.0) - 12582912.0``
# rounds fp32 to whole numbers with no rounding op): a step function written as additions
ROUNDING_GRID = 2.0 ** -8


def _rounds_by_magnitude(args: tuple, kwargs: dict | None = None) -> bool:
    """Whether an addition's constant operand (a number, or a one-element tensor beside a
    larger float tensor), times its ``alpha``, is large enough that the sum keeps the tensor
    only on a grid of ``ROUNDING_GRID`` of its largest magnitude or coarser. Read with
    ``aminmax``: no temporary of the tensor's size."""
    import torch

    alpha = (kwargs or {}).get("alpha", 1)
    tensors = [a for a in args[:2] if isinstance(a, torch.Tensor)]
    big = [t for t in tensors if t.is_floating_point() and t.numel() > 1]
    constants = [a for a in args[:2] if isinstance(a, (int, float)) and not isinstance(a, bool)]
    constants += [float(t) for t in tensors if t.numel() == 1 and t.is_floating_point()]
    if len(big) != 1 or len(constants) != 1 or not constants[0] or \
            not isinstance(alpha, (int, float)):
        return False
    x = big[0].detach()
    grid = abs(constants[0] * (alpha if args[1] is not x else 1)) * torch.finfo(x.dtype).eps
    low, high = torch.aminmax(x)
    largest = max(abs(float(low)), abs(float(high)))
    return largest > 0 and grid >= ROUNDING_GRID * largest
# Samplers that read the input at computed coordinates: with nearest-neighbour sampling a
# coordinate that crosses a pixel's edge moves the sampled value by a step (a spatial
# transformer's ``grid_sample(mode="nearest")``); their interpolation mode argument, nearest's
# code
SAMPLERS = {"grid_sampler_2d": 2, "grid_sampler_3d": 2, "grid_sampler": 2}
NEAREST = 1
# A float output element moved by this many times its tolerance under honest noise jumped: the
# noise itself moves a continuous output by about the tolerance
JUMP = 100.0


# Ops that carry a tensor on (views, reshapes, copies, moves) without reading its values
CARRIERS = frozenset({"view", "_unsafe_view", "reshape", "clone", "contiguous", "flatten",
                      "unsqueeze", "squeeze", "expand", "permute", "transpose", "t", "detach",
                      "alias", "_to_copy", "to", "lift_fresh"})


def _decides(model, inputs: list, forward_seed: int, copies: bool) -> tuple[bool, bool, dict]:
    """Does the forward decide something from float values: an op that takes a float tensor
    and returns only integer or boolean ones (a comparison, argmax, bucketize) or returns
    some beside its float ones that are then read (``max(dim)``'s indices), a
    discontinuous function (``DISCONTINUOUS``: rounding, a histogram's counts), a nearest-
    neighbour sampler at computed coordinates (``SAMPLERS``) or a selection whose order among
    ties is unspecified (``UNORDERED_SELECTIONS``)? Its float outputs may then jump. And
    does it sort or select, of any dtype, where the order among ties is unspecified
    (``REORDERED``: integer keys too, which no float noise moves)? And the picks of the
    pools (by call number, ``pools.PoolPicks``) that only an unpool reads: positions, by this
    rule not a decision, which the noisy forwards are given (noise that flips a window's
    maximum would move its value by a step)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    seen = []
    sorts = []
    picks = []  # every pool's picks, by call number
    unpooled, decided = set(), set()  # call numbers of pools read by an unpool, and otherwise
    # integer results made beside float ones (``max(dim)``'s indices beside its values, a max
    # pool's): a decision once anything reads them (a router's top-1 expert, a gather at the
    # pool's peaks), not before (indices kept for a backward) and not a pool's by its unpool
    # id -> (the op's name, a weak reference to the result, the pool call numbers it holds
    # picks of, None among them for indices of another kind)
    beside: dict[int, tuple] = {}

    def read(tensors, reader: str = "") -> None:
        for t in tensors:
            entry = beside.get(id(t))
            if entry is None or entry[1]() is not t:
                continue
            # pools' indices read by an unpool are positions, not a decision
            if None not in entry[2] and reader.startswith("max_unpool"):
                unpooled.update(entry[2])
            else:
                seen.append(entry[0])
                decided.update(entry[2])

    class Decisions(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            numbers = frozenset({None})
            if is_pool(func.overloadpacket.__name__) and returns_picks(out):
                numbers = frozenset({len(picks)})
                picks.append(out[1].clone())  # (a forward may shift its own in place)
            given = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
            tracked = [beside[id(t)] for t in given
                       if id(t) in beside and beside[id(t)][1]() is t]
            if tracked and (func.overloadpacket.__name__ in CARRIERS or not any(
                    t.is_floating_point() or t.is_complex() for t in given)):
                # a view or copy of tracked indices, or what integer work makes of them (a
                # slice, a chunk, index arithmetic), is tracked as they are: the float work
                # that first reads them decides (not a reshape on the way to the unpool)
                held = frozenset().union(*(entry[2] for entry in tracked))
                beside.update((id(t), (tracked[0][0], weakref.ref(t), held))
                              for t in tree_leaves(out) if isinstance(t, torch.Tensor))
                return out
            read(given, func.overloadpacket.__name__)
            if _reorderable(func, args, kwargs) is not None:
                sorts.append(func.overloadpacket.__name__)
            if any(t.is_floating_point() or t.is_complex() for t in given):
                made = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
                name = func.overloadpacket.__name__
                at = SAMPLERS.get(name)
                nearest = at is not None and len(args) > at and args[at] == NEAREST
                exact = [t for t in made if not (t.is_floating_point() or t.is_complex())]
                # a selection whose order among exact ties is unspecified (its values are
                # defined, its indices and whatever follows them are not)
                if _discontinuous(name, args, kwargs) or nearest or \
                        name in UNORDERED_SELECTIONS or \
                        (made and len(exact) == len(made)):
                    seen.append(name)
                else:  # (a pool's indices: a decision where other than its unpool reads them)
                    floats = {tuple(t.shape) for t in made if t.is_floating_point()}
                    beside.update((id(t), (name, weakref.ref(t), numbers)) for t in exact
                                  if tuple(t.shape) in floats)
            return out

    with Decisions():
        outs = forward(model, inputs, forward_seed, copies)
    # (an output itself counts as read)
    read(tree_leaves(outs))
    return bool(seen), bool(sorts), {n: picks[n] for n in unpooled - decided if n is not None}


def _reorderable(func, args: tuple, kwargs: dict) -> tuple | None:
    """(input, dim, kind, options) of a sort or top-k whose order among ties is unspecified
    (not asked ``stable``), or of a selection along a dim (``SELECTED_ALONG``), else None;
    ``options``: the keywords to run it again with (``descending``; ``k`` and ``largest``;
    None: the op itself with its own arguments)."""
    name = func.overloadpacket.__name__
    if name not in REORDERED or not args or not hasattr(args[0], "shape"):
        return None
    if "out" in kwargs or name.endswith("_") or \
            func._overloadname.endswith(("out", "values", "values_stable")):
        return None  # results written into given tensors (``out=``): left as they are
    if name in SELECTED_ALONG:
        # a value chosen along a dim and its index (a median, k-th value or mode of tied
        # keys: integer depths, votes); a median of the whole tensor returns no index. The
        # dispatcher drops arguments left at their default (``kthvalue(x, k)``: dim -1)
        if name in ("median", "nanmedian") and "dim" not in func._overloadname:
            return None
        at = SELECTED_ALONG[name]
        dim = kwargs.get("dim", args[at] if len(args) > at else -1)
        if not isinstance(dim, int):
            return None
        return args[0], dim, name, None
    if name == "sort":
        if kwargs.get("stable"):
            return None
        dim = kwargs.get("dim", args[1] if len(args) > 1 and not isinstance(args[1], bool)
                         else -1)
        descending = kwargs.get("descending", args[2] if len(args) > 2 and
                                isinstance(args[2], bool) else False)
        return args[0], dim, name, {"descending": bool(descending)}
    dim = kwargs.get("dim", args[2] if len(args) > 2 else -1)
    k = args[1] if len(args) > 1 else kwargs["k"]
    largest = kwargs.get("largest", args[3] if len(args) > 3 else True)
    return args[0], dim, name, {"k": k, "largest": bool(largest)}


# Sorts and top-k whose order among exact ties is unspecified: run again with the ties in
# another order (``_TiesReordered``)
# and selections along a dim that return the chosen element's index (its position among
# ties is the implementation's: CUDA and the CPU pick other tied elements), by where their
# ``dim`` argument sits
SELECTED_ALONG = {"median": 1, "nanmedian": 1, "mode": 1, "kthvalue": 2}
REORDERED = frozenset({"sort", "topk", *SELECTED_ALONG})


class _TiesReordered:
    """A dispatch mode under which every unstable sort and top-k, and every selection along a
    dim (``SELECTED_ALONG``), returns another valid answer: the same op on its input permuted
    at random along the dimension (a stable sort of it), its indices mapped back. Keys that tie, of any dtype (expert ids, whole-second timestamps),
    come out in another order; distinct keys as before."""

    def __new__(cls, seed: int):
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode

        gen = torch.Generator(device="cpu").manual_seed(seed)

        class Reordered(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                found = _reorderable(func, args, kwargs)
                if found is None:
                    return func(*args, **kwargs)
                x, dim, name, options = found
                if x.dim() == 0 or x.numel() == 0:
                    return func(*args, **kwargs)
                dim = dim % x.dim()
                perm = torch.randperm(x.shape[dim], generator=gen).to(x.device)
                moved = x.index_select(dim, perm)
                if options is None:  # ``SELECTED_ALONG``: the same op on the moved input
                    values, index = func(moved, *args[1:], **kwargs)[:2]
                elif name == "sort":
                    values, index = torch.sort(moved, dim=dim, stable=True, **options)
                else:
                    values, index = torch.topk(moved, dim=dim, sorted=True, **options)
                return values, perm[index]

        return Reordered()


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
                move, bound = a64 - b64, tol * (1.0 + b64.abs())
                left = (s64 - b64 - STEP_SCALE * move).abs()
                jumped = (move.abs() > JUMP * bound) & (left > JUMP * STEP_SCALE / 2 * bound) & \
                    (left > NONLINEAR * move.abs())
                finite = torch.isfinite(b64)
                bad += int((jumped | (torch.isfinite(a64) != finite) |
                            (torch.isfinite(s64) != finite)).sum())
    return {"changed": bad, "fraction": bad / total if total else 0.0, "total": total}


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


# Ops that sum products or accumulate besides torch's FLOP formulas and ``REDUCTIONS``:
# matrix-vector and dot products, running products, averaging pools and interpolations,
# accumulating scatters, distances, losses. Ops that move, select, place constants (a
# triangular mask, padding, a fill) or cast compute nothing an honest kernel could round
# otherwise.
ACCUMULATING = frozenset({
    "mv", "dot", "vdot", "addmv", "addr", "cumprod", "logcumsumexp", "avg_pool1d",
    "avg_pool2d", "avg_pool3d", "adaptive_avg_pool1d", "adaptive_avg_pool2d",
    "adaptive_avg_pool3d", "_adaptive_avg_pool2d", "_adaptive_avg_pool3d", "upsample_linear1d",
    "upsample_bilinear2d", "upsample_bicubic2d", "upsample_trilinear3d",
    "_upsample_bilinear2d_aa", "_upsample_bicubic2d_aa", "grid_sampler_2d", "grid_sampler_3d",
    "scatter_add", "scatter_add_", "index_add", "index_add_", "scatter_reduce",
    "_embedding_bag", "embedding_bag", "_cdist_forward", "_pdist_forward", "trace",
    "nll_loss_forward", "nll_loss2d_forward", "mse_loss", "l1_loss", "smooth_l1_loss",
    "huber_loss", "binary_cross_entropy", "kl_div", "_weight_norm_interface",
    # transforms: sums of products over a signal (an STFT, a spectral filter)
    "_fft_r2c", "_fft_c2c", "_fft_c2r"})


def _computed(func) -> bool:
    """Does ``func`` compute its values by accumulating (an honest kernel's summation order
    changes its rounding)? Torch's FLOP formulas, ``REDUCTIONS`` and ``ACCUMULATING``; an
    elementwise op rounds once, correctly (an ulp, far below the noise)."""
    from torch.utils.flop_counter import flop_registry

    name = func.overloadpacket.__name__
    return func.overloadpacket in flop_registry or name in REDUCTIONS or name in ACCUMULATING


class _HonestNoise:
    """A TorchDispatchMode that adds to the result of every accumulating op (``_computed``)
    ``rel`` times its RMS in Gaussian noise (what another summation order or a kernel within
    the tolerance makes of it), and moves the input of selections with unordered ties
    (``UNORDERED_SELECTIONS``) the same way, so exact ties split. Values that no such op
    touched (the inputs, the parameters, masks and what is only moved from them) stay exact: a
    selection over them is defined. Non-finite elements stay as they are; the noise is drawn on
    the tensor's device."""

    def __new__(cls, rel: float, seed: int):
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode

        generators: dict = {}

        def moved(x):
            if not (isinstance(x, torch.Tensor) and (x.is_floating_point() or x.is_complex())
                    and x.numel() > 1):
                return x
            gen = generators.get(x.device)
            if gen is None:
                gen = generators[x.device] = torch.Generator(device=x.device).manual_seed(seed)
            finite = torch.isfinite(x)
            count = int(finite.sum())
            if not count:
                return x
            kept = torch.where(finite, x, torch.zeros((), dtype=x.dtype, device=x.device))
            if kept.is_complex():  # the RMS of the magnitudes
                kept = torch.view_as_real(kept)
            rms = float(torch.linalg.vector_norm(kept, dtype=torch.float64)) / math.sqrt(count)
            del kept
            noise = torch.randn(x.shape, generator=gen, dtype=x.dtype, device=x.device)
            return torch.where(finite, x + noise.mul_(rel * rms), x)

        class Noise(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                name = func.overloadpacket.__name__
                if name in UNORDERED_SELECTIONS and args:
                    args = (moved(args[0]), *args[1:])
                out = func(*args, **kwargs)
                if _computed(func):
                    if isinstance(out, torch.Tensor):
                        return moved(out)
                    if isinstance(out, tuple) and out:
                        return (moved(out[0]), *out[1:])
                return out

        return Noise()


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


def _summed(total: dict | None, part: dict) -> dict:
    """Changed elements summed over draws, against the elements of all those draws, and the
    draws that changed any."""
    total = total or {"changed": 0, "total": 0, "draws_changed": 0}
    changed, elements = total["changed"] + part["changed"], total["total"] + part["total"]
    return {"changed": changed, "total": elements,
            "fraction": changed / elements if elements else 0.0,
            "draws_changed": total["draws_changed"] + bool(part["changed"])}


def _exact_moved(a, b):
    """Which elements of an integer or boolean output changed (None for a float one)."""
    return None if b.is_floating_point() or b.is_complex() else a != b


def _jump_moved(tol: float, times: float = JUMP):
    """Which elements of a float output moved by ``times`` tolerances or more (``_jumped``)."""
    import torch

    def moved(a, b):
        if not b.is_floating_point():
            return None
        a64, b64 = a.double(), b.double()
        return ((a64 - b64).abs() > times * tol * (1.0 + b64.abs())) | \
            (torch.isfinite(a64) != torch.isfinite(b64))
    return moved


def _spots(a, b, moved) -> int | None:
    """The near-ties one output's change counts: along the dimension (size-one ones dropped)
    where the indices of the elements ``moved`` marks are sparsest for its size, how many
    indices there hold one (a flipped token moves one row of a one-hot, or the whole row of a
    routed expert's output, whether tokens lead or follow: its other dimension fills up or
    holds the two classes of every flip); its marked elements where it has one dimension (or
    slices too large to mark whole); None for an output ``moved`` does not read. Blocks of
    whole leading slices."""
    shape = [n for n in b.shape if n != 1] or [1]
    b = b.detach().reshape(shape)
    if moved(b[:0], b[:0]) is None:
        return None
    if not b.numel():
        return 0
    if a is None:  # no comparable output: every index changed
        return min(shape)
    a = a.detach().reshape(shape)
    if len(shape) == 1 or b[0].numel() > C.CHUNK:
        return sum(int(moved(x, y).sum()) for x, y in C._blocks(a, b))
    step = max(1, C.CHUNK // b[0].numel())
    leading, held = 0, [None] * len(shape)
    for start in range(0, shape[0], step):
        mask = moved(a[start:start + step], b[start:start + step])
        leading += int(mask.flatten(1).any(1).sum())
        for dim in range(1, len(shape)):
            others = tuple(d for d in range(len(shape)) if d != dim)
            seen = mask.any(dim=others)
            held[dim] = seen if held[dim] is None else held[dim] | seen
    counts = [leading] + [int(h.sum()) for h in held[1:]]
    return min(zip((c / n for c, n in zip(counts, shape)), counts))[1]


def _events(out: list | None, ref: list, moved) -> int:
    """The near-ties a draw's change counts: the most any one output counts (``_spots``: an
    index and the one-hot made from it count one near-tie once)."""
    same = out is not None and C.shapes_equal(out, ref)
    counts = [_spots(out[i] if same else None, b, moved) for i, b in enumerate(ref)]
    return max((c for c in counts if c is not None), default=0)


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
             seed: int, copies: bool, kinds: dict, dtype: str, picks: dict | None = None) -> dict:
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
    on a further draw those of its own clean forward."""
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
        clean = out = None
        try:
            given = next(sources)
            if draw:
                with PoolPicks(picks or ()) as recorded:
                    clean = forward(model, given, forward_seed, copies)
                held = recorded.kept
                with _HonestNoise(rel, base), pinned(held):
                    out = forward(model, given, forward_seed, copies)
            else:
                clean, out, held = ref, first.pop(), picks
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
            record[name]["full"] += events
            record[name]["changed"] = _summed(record[name]["changed"], changed(out, clean))
            flipped = flipped or bool(events)
        out = None
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


def exact_outputs(model, inputs: list, ref: list, forward_seed: int, rel: float, seed: int,
                  device: str, copies: bool = True, tol: float | None = None, more=None,
                  dtype: str = "float32") -> dict | None:
    """Outputs decided by near-tied float values: how many integer and boolean output elements
    change (a) when the float work carries honest noise (``_HonestNoise`` at ``rel``, the
    tolerance's scale) and (b) on one CPU thread instead of several; with ``tol`` (the
    problem's tolerance), how many float output elements jump by ``JUMP`` tolerances under the
    same noise, where the forward decides something from float values (``_decides``: a sign
    hash, a one-hot of an argmax, rounding) or where, with nothing named deciding, some float
    output element jumped under it, off the move the noise makes linearly (``_nonlinear``: a
    pole or cut made of several ops); how dense the
    near-ties those noises meet are (``_density``, over further draws of the inputs from
    ``more``; ``dtype`` sets the honest rounding). None: every output is floating-point and
    nothing decides or jumped (or no ``tol``)."""
    import torch

    floats_only = all(t.is_floating_point() or t.is_complex() for t in ref)
    decides, sorts, picks = _decides(model, inputs, forward_seed, copies)
    gradable = tol is not None and any(t.is_floating_point() for t in ref)
    decides = decides and gradable
    # the jumps of a forward where nothing decides are measured too; its noisy forwards are
    # given the picks of the pools only an unpool reads (positions, not decisions). Not those
    # of a forward that decides: a decision may read what an unpool made (``up != 0``)
    probe = gradable and not decides
    if not probe:
        picks = {}
    if floats_only and not decides and not probe and not (sorts and tol is not None):
        return None
    # a forward the noise breaks raises: the check is then not measured (``forwards._measured``)
    jumped = steps = density = smaller = None
    undecided = False  # jumps where no op decides
    with _HonestNoise(rel, seed), pinned(picks):
        out = forward(model, inputs, forward_seed, copies)
    jittered = _exact_changed(out, ref)
    if probe:
        # nothing the trace names decides, yet a float output may still jump under the noise:
        # a composition with a pole or a cut that no single op has (the half-angle phase
        # ``2 * atan(im / (|z| + re))``, infinite on the negative reals). Where one does, the
        # output is judged as a decided one; where none does, as before
        jumped = _jumped(out, ref, tol)
        if jumped["changed"]:  # the noise's own move, or a jump (``_nonlinear``)?
            with _HonestNoise(rel * STEP_SCALE, seed), pinned(picks):
                smaller = forward(model, inputs, forward_seed, copies)
            jumped = _nonlinear(out, smaller, ref, tol)
        decides = undecided = jumped["changed"] > 0
        if not decides:
            if floats_only and not (sorts and tol is not None):
                return None
            jumped = None
    if decides:
        jumped = jumped or _jumped(out, ref, tol)
        # the same noise a tenth as large: steps under 100 tolerances. Against the noise's own
        # scale (the dtype's floor) where the calibrated tolerance is larger: a reference whose
        # fp32 and fp64 forwards differ by a step calibrates a tolerance of ten steps (a QKeras
        # grid on CUDA: 7.9e-3 for steps of 1e-3), which would hide the very steps an honest
        # kernel's rounding flips
        if smaller is None:
            with _HonestNoise(rel * STEP_SCALE, seed), pinned(picks):
                smaller = forward(model, inputs, forward_seed, copies)
        steps = _steps(out, smaller, ref, min(tol, rel))
    smaller = None
    kinds = {}
    if not floats_only:
        kinds["jittered"] = (_exact_moved, _exact_changed)
    if decides:
        kinds["jumped"] = (_jump_moved(tol), lambda a, b: _jumped(a, b, tol))
    if kinds:
        first, out = [out], None  # ``_density`` lets it go after its first draw
        density = _density(model, inputs, ref, first, more, forward_seed, rel, seed, copies,
                           kinds, dtype, picks)
    del out
    threads = None
    if not floats_only and not device.startswith("cuda") and torch.get_num_threads() > 1:
        before = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            threads = _exact_changed(forward(model, inputs, forward_seed, copies), ref)
        finally:
            torch.set_num_threads(before)
    reordered = None
    if sorts and tol is not None:
        # the same forward with ties sorted in another order: an output that follows it is
        # defined by no kernel (a float output off by a tolerance, an exact one at all)
        with _TiesReordered(seed):
            out = forward(model, inputs, forward_seed, copies)
        reordered = {"exact": _exact_changed(out, ref), "moved": _jumped(out, ref, tol, times=1.0)}
        del out
    kept = (density or {}).get("kinds", {})
    return {"jitter": rel, "jittered_changed": jittered, "threads_changed": threads,
            "jumped": jumped, "undecided": undecided, "steps": steps, "reordered": reordered,
            "small_jitter": rel * STEP_SCALE,
            "small_jittered_changed": kept.get("jittered", {}).get("small_changed"),
            "small_jumped": kept.get("jumped", {}).get("small_changed"),
            "small_draws": (density or {}).get("small_draws", 0), "density": density,
            "outputs": [str(t.dtype).replace("torch.", "") for t in ref
                        if not (t.is_floating_point() or t.is_complex())]}
