"""Outputs graded exactly: ``exact_outputs`` (integer and boolean outputs under honest float
noise and another thread count, float outputs that jump under it where the forward decides from
float values, and outputs that follow the order among ties). Writes whose winner is undefined
are ``writes.duplicate_writes``."""
from __future__ import annotations

import weakref

from .common import forward
from .density import _density
from .moves import (
    STEP_SCALE,
    _exact_changed,
    _exact_moved,
    _jump_moved,
    _jumped,
    _nonlinear,
    _steps,
)
from .noise import UNORDERED_SELECTIONS, _HonestNoise
from .pools import is_pool, pinned, returns_picks

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
        # the same noise a tenth as large: steps under 100 tolerances. Against the noise's own
        # scale (the dtype's floor) where the calibrated tolerance is larger: a reference whose
        # fp32 and fp64 forwards differ by a step calibrates a tolerance of ten steps (a QKeras
        # grid on CUDA: 7.9e-3 for steps of 1e-3), which would hide the very steps an honest
        # kernel's rounding flips
        if smaller is None:
            with _HonestNoise(rel * STEP_SCALE, seed), pinned(picks):
                smaller = forward(model, inputs, forward_seed, copies)
        # and the jumps off the noise's own linear move, as where nothing decides: a wide
        # output's small elements (a prefix sum's first terms) move linearly by 100 tolerances
        # beside whatever else decides (``cumsum(where(x > -1, x, 0))``)
        jumped = jumped or _nonlinear(out, smaller, ref, tol)
        steps = _steps(out, smaller, ref, min(tol, rel))
    kinds = {}
    if not floats_only:
        kinds["jittered"] = (_exact_moved, lambda a, b, _smaller=None: _exact_changed(a, b))
    if decides:
        kinds["jumped"] = (_jump_moved(tol), lambda a, b, smaller=None: _jumped(a, b, tol)
                           if smaller is None else _nonlinear(a, smaller, b, tol))
    if kinds:
        # ``_density`` lets them go after its first draw
        first, out, smaller = [(out, smaller if decides else None)], None, None
        density = _density(model, inputs, ref, first, more, forward_seed, rel, seed, copies,
                           kinds, dtype, picks, scaled=("jumped",))
    del out, smaller
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
