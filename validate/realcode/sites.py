"""``dead_sites``: dead code that no sub-module holds. Every torch call made from a line of the
problem's own source (the line and the function called there; a sub-module's internals count at
the line that called the sub-module) that computes something is bypassed in turn, in every call
that line makes: its result replaced by zeros. A bypass that leaves the output within tolerance is
dead: in both states, a residual branch scaled by a layer-scale of 1e-6 written inline; on the
declared parameters alone, work killed by its initialization (a functional low-rank adapter whose
second factor starts at zero adds exactly 0), which any answer to the problem as written may skip
(zeroing, unlike skipping, leaves a multiplication by a weight of ones or an added zero bias
live: none of the 97 seeds nor the healthy fixtures has such a site). A product by a
constant of at most ``DAMPING`` (or a chain of such scalings, through copies, layouts and
casts, or one written in place; or by a small tensor none of whose elements exceeds that, a
layer-scale) is tried zeroed though it combines no two tensors, and a term added under
``alpha=`` or ``value=`` of at most that (``torch.addmm(h, ff, w, alpha=1e-6)``, the deprecated
positional forms too), or a product one of whose operands such a scaling damps, is tried
dropped in the calls it damps. A matrix product,
convolution or attention call with an operand that is a parameter or buffer exactly zero as
declared is dead work at initialization too, whatever the call's result (a query projection whose
weight starts at zero gives its bias: the product can be skipped).
A rescaling site is also skipped up to one factor: a normalization call (``normalize``,
``layer_norm``, ``rms_norm``, ``log_softmax``...), a similarity that normalizes inside
(``cosine_similarity``, against its dot product), or a product or quotient of a tensor by a smaller one of more
than one element computed from it (a statistic of its own: not a weight of ones, a scalar, or a
mask computed from the inputs), its result replaced by its same-shaped operand times the
least-squares scalar (a factor made through a clip or a test, a norm clip or a mask of the
non-empty rows, is not one). Within tolerance on the declared parameters it is a
redundant normalization: an inline RMS norm after a LayerNorm whose weight is one, an
``F.normalize`` times sqrt(D) after a LayerNorm, a log-softmax of log-probabilities. A call that
writes into its operand (``h.div_(h.norm(dim=-1, keepdim=True))``) is skipped from that operand
as it was before the call, and the skipped result written into it.
Skipping a call outright (its first argument for its result) is not tried: code a later step makes
irrelevant by design, such as a softmax's max subtraction, would read as dead. Calls that write
into an argument (``masked_fill_``) are not tried either (their effect is already made), and sites
of under ``MIN_SHARE`` of the work, or that combine no two tensors (an epsilon or another
constant added to one, a function of one tensor), are not tried: dead work is a branch that
meets the rest, a scaled one, a second normalization."""
from __future__ import annotations

import linecache
import numbers
import sys

from .. import checks as C
from .common import forward, within

# Most call sites zeroed per state, largest first.
MOST_SITES = 24
# Sites carrying less of the forward's work (its FLOPs, or for elementwise work the elements
# written, against the largest site's) are not tried: an epsilon added to a row statistic is
# within tolerance by design and costs a kernel nothing to keep
MIN_SHARE = 0.01
SOURCE_PREFIX = "<kernelmill-"  # the file names ``measure.load_namespace`` gives a source
# A site called several times in one forward (one line run for every layer of a loop, or of a
# stack of weights) is also zeroed one call at a time: a layer appended with a layer-scale of
# 1e-6, or one whose result the output never takes, is dead where its siblings are not. At most
# this many single calls per site (the last, the first, then inward) and per problem.
CALLS_PER_SITE = 12
MOST_CALLS = 48
# ... and such calls dead alone count only where together they carry this share of the
# forward's work (a layer's worth): the last step of a greedy decode computes a token nobody
# reads (4% of its work), which a kernel skips for little
DEAD_CALLS_SHARE = 0.1
# Calls whose work is a product of their operands (torch function names): one operand exactly
# zero makes the product's work dead
PRODUCT_CALLS = frozenset({
    "linear", "bilinear", "matmul", "__matmul__", "__rmatmul__", "mm", "bmm", "mv", "addmm",
    "addbmm", "baddbmm", "addmv", "einsum", "tensordot", "conv1d", "conv2d", "conv3d",
    "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "scaled_dot_product_attention"})


def _site(depth: int = 2) -> tuple[str, int] | None:
    """(file, line) of the innermost frame of the problem's own source above the caller."""
    frame = sys._getframe(depth)
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith(SOURCE_PREFIX):
            return name, frame.f_lineno
        frame = frame.f_back
    return None


# (a log-softmax of log-probabilities gives them back: its sum of exponentials is one)
NORM_CALLS = frozenset({"normalize", "layer_norm", "rms_norm", "group_norm", "instance_norm",
                        "batch_norm", "local_response_norm", "log_softmax", "renorm"})
SCALE_CALLS = frozenset({"mul", "__mul__", "__rmul__", "div", "__truediv__", "true_divide",
                         "__itruediv__", "__imul__", "div_", "mul_", "true_divide_"})
QUOTIENTS = ("div", "true_divide", "__truediv__", "__itruediv__")
# A centering: the operand less a statistic of its own (``h - h.mean(-1, keepdim=True)``),
# skipped as a rescaling is (the least-squares factor comes out near 1 where it is redundant)
SHIFT_CALLS = frozenset({"sub", "__sub__", "__isub__", "sub_"})


# Similarities that normalize their operands inside, skipped up to one factor as a
# normalization is: their result replaced by the unnormalized form's times the least-squares
# scalar (``cosine_similarity`` of LayerNorm outputs, whose rows all have norm sqrt(D) at
# the LayerNorm's declared weight: its norms are one constant)
NORMALIZED_PRODUCTS = frozenset({"cosine_similarity"})


def _unnormalized(name: str, args: tuple, kwargs: dict):
    """The form of a ``NORMALIZED_PRODUCTS`` call without its normalization (the dot product
    along its dim), or None where its operands are not two tensors."""
    import torch

    x1 = kwargs.get("x1", args[0] if args else None)
    x2 = kwargs.get("x2", args[1] if len(args) > 1 else None)
    dim = kwargs.get("dim", args[2] if len(args) > 2 else 1)
    if not (isinstance(x1, torch.Tensor) and isinstance(x2, torch.Tensor)):
        return None
    return (x1 * x2).sum(dim)


def _in_place(name: str) -> bool:
    """Whether a torch call of this name writes its result into its first operand."""
    return (name.startswith("__i") and name.endswith("__")) or \
        (name.endswith("_") and not name.startswith("_"))


# Ops through which a factor is a clip or a test, not a statistic (a norm clip that never bites
# on the draws, a mask of the rows that are not empty): such a factor is not a rescaling
CLIP_OPS = frozenset({
    "clamp", "clamp_", "clamp_min", "clamp_max", "clip", "where", "maximum", "minimum",
    "threshold", "relu", "hardtanh", "sign", "floor", "ceil", "round", "gt", "ge", "lt", "le",
    "eq", "ne", "__gt__", "__ge__", "__lt__", "__le__", "__eq__", "__ne__", "isfinite",
    "logical_and", "logical_or", "logical_not"})
MOST_ANCESTORS = 64  # nodes searched back from a factor for the tensor it rescales
_TOKENS = iter(range(1, 1 << 62))


def _token(tensor, fresh: bool = False):
    """What names ``tensor`` in the ancestry of one forward: a number set on each result as it
    is made (an address is reused once its tensor is freed), else its storage's address (a
    parameter, a buffer or an input: alive throughout)."""
    if fresh:
        try:
            tensor._kernelmill_token = next(_TOKENS)
        except (AttributeError, RuntimeError):
            return ("storage", tensor.untyped_storage().data_ptr())
    token = getattr(tensor, "_kernelmill_token", None)
    return token if token is not None else ("storage", tensor.untyped_storage().data_ptr())


def _statistic_of(factor, main, parents: dict) -> bool:
    """Whether ``factor`` was computed from ``main`` or from an operand of the op that made
    ``main`` (``(h - mean(h)) / std(h)``: the scale is a statistic of ``h``) (``parents``: a
    result's token -> its op's name and its operands' tokens), within ``MOST_ANCESTORS`` steps
    back and through no clip or test (``CLIP_OPS``)."""
    own = _token(main)
    wanted, seen = {own, *parents.get(own, ("", ()))[1]}, set()
    todo = [_token(factor)]
    while todo and len(seen) < MOST_ANCESTORS:
        token = todo.pop()
        if token in seen:
            continue
        seen.add(token)
        op, operands = parents.get(token, ("", ()))
        if op in CLIP_OPS:
            return False
        if wanted.intersection(operands):
            return True
        todo.extend(operands)
    return False


def _rescaled_operand(name: str, given: list, out, parents: dict | None = None):
    """The operand ``out`` is a rescaling of (see the module docstring), or None: the first
    same-shaped operand of a normalization call, or the same-shaped operand of a product or
    quotient by (or the first operand less) a smaller tensor of more than one element computed
    from it (a statistic of its own, ``_statistic_of``; without ``parents``, any)."""
    same = [v for v in given if v.shape == out.shape and v.is_floating_point()]
    if not same:
        return None
    if name in NORM_CALLS:
        return same[0]
    shift = name in SHIFT_CALLS and len(given) == 2 and given[0] is (same[0] if same else None)
    if name in SCALE_CALLS and name.startswith(QUOTIENTS) and len(given) == 2 and \
            len(same) == 2 and given[0] is not given[1] and (
                parents is None or _statistic_of(given[1], given[0], parents)):
        # a quotient by a divisor of the output's own shape made from statistics of what made
        # the numerator (a hand-written cosine: ``q @ d.T / outer(|q|, |d|)``)
        return given[0]
    if (name in SCALE_CALLS or shift) and len(given) == 2 and len(same) == 1:
        main = same[0]
        other = given[1] if given[0] is main else given[0]
        if 1 < other.numel() < out.numel() and (
                parents is None or _statistic_of(other, main, parents)):
            return main
    return None


# A product of one tensor by a constant this small (or a quotient by one this large's
# inverse) damps a branch: a layer-scale written as a number (``gelu(h) * 1e-6``), tried
# zeroed though it combines no two tensors
DAMPING = 1e-3


# A smaller operand of a product of two tensors (a per-channel layer-scale ``gamma``) is read
# as a factor of at most its largest magnitude where it has at most this many elements
SMALL_FACTOR = 1 << 12


def _scaling(name: str, args: tuple, kwargs: dict, given: list) -> tuple[float, object] | None:
    """(factor, scaled): the constant a product (or quotient) of one tensor by one number
    multiplies it by, or the bound on the factor a smaller tensor of at most ``SMALL_FACTOR``
    elements multiplies (or divides) the larger by (its largest magnitude: ``w * gamma``,
    ``gamma`` a layer-scale parameter); and the tensor scaled. None where the call is not such
    a scaling."""
    import torch

    if name not in SCALE_CALLS:
        return None
    quotient = name.startswith(QUOTIENTS)
    constants = [a for a in (*args, *kwargs.values())
                 if isinstance(a, numbers.Real) and not isinstance(a, bool)]
    if len(given) == 1 and len(constants) == 1:
        value = float(constants[0])
        if quotient:
            return (1.0 / value, given[0]) if value else None
        return value, given[0]
    if len(given) != 2 or constants:
        return None
    big, small = sorted(given, key=lambda t: -t.numel())
    if not (small.is_floating_point() and 0 < small.numel() < big.numel()
            and small.numel() <= SMALL_FACTOR) or (quotient and small is not given[1]):
        return None
    with torch.no_grad():
        low, high = torch.aminmax(small.detach().abs())
        low, high = float(low), float(high)
    if quotient:
        return (1.0 / low, big) if low > 0 else None
    return high, big


# Ops that hand a tensor's values on unchanged (a layout, a copy, a cast, a slice): a scaling's
# factor carries through them to the next scaling of the chain
CARRIERS = frozenset({
    "contiguous", "clone", "view", "reshape", "view_as", "reshape_as", "flatten", "unflatten",
    "transpose", "permute", "t", "movedim", "unsqueeze", "squeeze", "expand", "expand_as", "to",
    "float", "half", "bfloat16", "double", "type_as", "__getitem__", "narrow", "select"})


# Calls that add a term scaled by a keyword constant (``alpha``, ``value``): the term damped by
# one of at most ``DAMPING`` (``torch.add(x, branch, alpha=1e-6)``, ``addmm(..., alpha=1e-6)``)
# is tried dropped, the call made again with that constant 0
# (these add a product of two operands, scaled by ``alpha``)
ALPHA_PRODUCTS = frozenset({"addmm", "addmm_", "addbmm", "addbmm_", "baddbmm", "baddbmm_",
                            "addmv", "addmv_", "addr", "addr_"})
TERM_CALLS = ALPHA_PRODUCTS | {"add", "add_", "sub", "sub_", "addcmul", "addcmul_", "addcdiv",
                               "addcdiv_"}
TERM_SCALES = ("alpha", "value")


def _small(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and bool(value) and \
        abs(float(value)) <= DAMPING


def _numbers_at(args: tuple) -> list[int]:
    """The positions of a call's number arguments."""
    return [i for i, a in enumerate(args) if isinstance(a, numbers.Real) and not isinstance(a, bool)]


def _alpha_at(args: tuple) -> str | int:
    """Where an ``ALPHA_PRODUCTS`` call's ``alpha`` sits: its position in the deprecated form
    ``(beta, input, alpha, ...)``, else the keyword."""
    numbers_at = _numbers_at(args)
    return numbers_at[1] if len(numbers_at) == 2 else "alpha"


def _damped_term(name: str, args: tuple, kwargs: dict) -> str | int | None:
    """Where the constant of at most ``DAMPING`` that damps a ``TERM_CALLS`` call's added term
    sits: its keyword, or its position in the deprecated positional forms
    (``addmm(beta, input, alpha, mat1, mat2)``, ``add(input, alpha, other)``, ``addcmul(input,
    value, t1, t2)``); None where no such constant damps it."""
    if name not in TERM_CALLS:
        return None
    for key in TERM_SCALES:
        if _small(kwargs.get(key)):
            return key
    if name in ALPHA_PRODUCTS:
        at = _alpha_at(args)  # (beta, input, alpha, ...)
        at = at if isinstance(at, int) else None
    else:
        least = 4 if name.startswith("addc") else 3
        at = 1 if _numbers_at(args) == [1] and len(args) >= least else None
    return at if at is not None and _small(args[at]) else None


# Calls that make a tensor of constants or noise from nothing or from another's shape alone
MADE = frozenset({"eye", "ones", "zeros", "full", "empty", "arange", "linspace", "logspace",
                  "rand", "randn", "randint", "randperm", "tensor", "as_tensor", "normal"})


def _carries_work(token, parents: dict, most: int = 256) -> bool:
    """Is a product call (``PRODUCT_CALLS``) among the ancestors of the result ``token``
    names, through anything but what only takes another tensor's shape (``*_like``,
    ``MADE``)? A branch's work, not a constant's or a jitter's."""
    todo, seen = [token], set()
    while todo and len(seen) < most:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        made = parents.get(current)
        if made is None:
            continue
        name, operands = made
        if name in PRODUCT_CALLS:
            return True
        if name.endswith("_like") or name in MADE:
            continue
        todo.extend(operands)
    return False


def _multiplied(name: str, args: tuple, kwargs: dict) -> list:
    """The operands a product call multiplies (not a bias, nor the term ``addmm`` adds: in
    every form of the ``ALPHA_PRODUCTS``, the deprecated positional ones and those written in
    place too, the last two tensor arguments)."""
    import torch

    if name == "einsum":
        picked = list(args[1:]) + list(kwargs.values())
    elif name in ALPHA_PRODUCTS:
        picked = [a for a in args if isinstance(a, torch.Tensor)][1:][-2:] + [
            v for k, v in kwargs.items() if k in ("mat1", "mat2", "batch1", "batch2", "mat",
                                                   "vec", "vec1", "vec2")]
    else:
        count = 3 if name in ("bilinear", "scaled_dot_product_attention") else 2
        picked = list(args[:count]) + [
            v for k, v in kwargs.items() if k in ("input", "weight", "other", "mat1", "mat2",
                                                   "batch1", "batch2", "mat", "vec", "input1",
                                                   "input2", "query", "key", "value", "a", "b")]
    return picked


def _zero_tensors(model) -> dict[int, str]:
    """Storage address -> name of each floating-point parameter or buffer exactly zero."""
    import torch

    found: dict[int, str] = {}
    for name, t in [*model.named_parameters(), *model.named_buffers()]:
        if t.is_floating_point() and t.numel() and not t.is_meta:
            with torch.no_grad():
                if not bool(t.detach().any()):
                    found.setdefault(t.untyped_storage().data_ptr(), name)
    return found


def _call_sites(model, inputs: list, forward_seed: int, copies: bool) -> tuple[dict, float]:
    """Per call site (file, line, function): the compute ops and cost its calls ran, whether
    a call wrote into (or returned) one of its arguments, the most tensor arguments a call
    took, and the exactly-zero parameter a product call took as an operand (``zero``)."""
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._pytree import tree_leaves

    from .bypass import _OpCounter

    counter = _OpCounter()
    sites: dict[tuple, dict] = {}
    zeros = _zero_tensors(model)
    parents: dict = {}  # a result's token -> its op's name and its operands' tokens

    factors: dict = {}  # a result's token -> the constant factor a chain of scalings gave it

    class Sites(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            ops, cost = counter.ops, counter.cost
            out = func(*args, **kwargs)
            given = [v for v in tree_leaves((args, kwargs)) if isinstance(v, torch.Tensor)]
            name = getattr(func, "__name__", str(func))
            counter.paused = True  # reading a factor is not the line's work
            try:
                scaling = _scaling(name, args, kwargs, given) \
                    if isinstance(out, torch.Tensor) else None
            finally:
                counter.paused = False
            factor = scaled = carried = None
            if scaling is not None:  # ``h * 0.01 * 0.01`` scales ``h`` by 1e-4
                factor, scaled = scaling
                factor *= factors.get(_token(scaled), 1.0)
            elif name in CARRIERS and given and isinstance(out, torch.Tensor):
                carried = factors.get(_token(given[0]))  # ``(h * 0.01).contiguous() * 0.01``
            if given:  # each result's op and operands (every tensor of a split's tuple)
                operands = tuple(_token(v) for v in given)
                for made in (out,) if isinstance(out, torch.Tensor) else \
                        (v for v in tree_leaves(out) if isinstance(v, torch.Tensor)):
                    parents[_token(made, fresh=True)] = (name, operands)
                if factor is not None:
                    factors[_token(out)] = factor
                elif carried is not None:
                    factors[_token(out)] = carried
            where = _site()
            if where is not None and isinstance(out, torch.Tensor) and out.is_floating_point():
                # the term a product adds damped by its ``alpha``, or by a scaling of one of its
                # operands (``addmm(h, ff, w.t() * 1e-6)``, ``w.t() * gamma``: the weight damped)
                term = _damped_term(name, args, kwargs)
                if term is None and name in ALPHA_PRODUCTS and any(
                        isinstance(v, torch.Tensor) and abs(factors.get(_token(v), 1.0)) <= DAMPING
                        for v in tree_leaves(_multiplied(name, args, kwargs))):
                    term = "alpha"
                entry = sites.setdefault((*where, name),
                                         {"ops": 0, "cost": 0.0, "numel": 0, "inplace": False,
                                          "operands": 0, "zero": None, "rescale": True,
                                          "damped": False, "terms": {}, "alphas": {},
                                          "calls": 0, "call_costs": [], "zero_calls": set()})
                entry["calls"] += 1
                entry["ops"] += counter.ops - ops
                entry["cost"] += counter.cost - cost
                entry["call_costs"].append(counter.cost - cost)
                # a product's operands exactly zero at this call (one pass over its operands)
                zero_operands = [
                    v for v in tree_leaves(_multiplied(name, args, kwargs))
                    if isinstance(v, torch.Tensor) and v.is_floating_point() and v.numel()
                    and not bool(v.any())] if name in PRODUCT_CALLS else []
                if zero_operands:
                    # a product with a state the forward made zero (a recurrence's first
                    # step): that call alone gives nothing by design
                    entry["zero_calls"].add(entry["calls"] - 1)
                storage = out.untyped_storage().data_ptr()
                entry["inplace"] |= any(v.untyped_storage().data_ptr() == storage for v in given)
                entry["numel"] += out.numel()
                entry["operands"] = max(entry["operands"], len(given))
                # a rescaling in every call it makes
                entry["rescale"] &= name in NORMALIZED_PRODUCTS or \
                    _rescaled_operand(name, given, out, parents) is not None
                # a branch damped by a small constant (``gelu(h) * 1e-6``, or a chain of
                # scalings to one) in some call, one that carries work (not a jitter: ``eye(n) *
                # 1e-6``); the site is tried zeroed, whose verdict then decides
                entry["damped"] |= factor is not None and abs(factor) <= DAMPING and \
                    _carries_work(_token(scaled), parents)
                # the calls whose term ``alpha``/``value`` damps, a product or a term that
                # carries work (not a jitter: ``add(k, eye, alpha=1e-6)``), and where it sits
                if term is not None and (name in ALPHA_PRODUCTS or any(
                        _carries_work(_token(v), parents) for v in given[1:])):
                    entry["terms"][entry["calls"] - 1] = term
                if name in ALPHA_PRODUCTS:  # every product term is tried dropped too
                    entry["alphas"][entry["calls"] - 1] = _alpha_at(args)
                if zeros and entry["zero"] is None:
                    # a parameter or buffer still zero here (a buffer the forward fills is not)
                    entry["zero"] = next((zeros[v.untyped_storage().data_ptr()]
                                          for v in zero_operands
                                          if v.untyped_storage().data_ptr() in zeros), None)
            return out

    with counter, Sites():
        forward(model, inputs, forward_seed, copies)
    return sites, counter.cost


def _answered(model, key: tuple, inputs: list, forward_seed: int, copies: bool,
              answer, call: int | None = None) -> list | None:
    """The output with every tensor call of site ``key`` (only its ``call``-th, counted as
    ``_call_sites`` counts them, where given) answered by ``answer(out, given, args, kwargs,
    func)`` (``given``: the call's tensor operands; a call that writes into its first operand
    gets that operand as it was, in ``given`` and ``args``). None when the forward then fails
    (a bypass that breaks forward is not dead)."""
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._pytree import tree_leaves

    made = [0]

    class Answer(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            where = _site()
            name = getattr(func, "__name__", str(func))
            mine = where is not None and (*where, name) == key
            # a call that writes into its first operand is answered from that operand as it
            # was, and its answer written there in turn
            before = args[0].clone() if mine and _in_place(name) and args and \
                isinstance(args[0], torch.Tensor) else None
            out = func(*args, **kwargs)
            if not mine or not isinstance(out, torch.Tensor):
                return out
            if call is not None:  # the calls ``_call_sites`` counts: floating-point results
                if not out.is_floating_point():
                    return out
                made[0] += 1
                if made[0] - 1 != call:
                    return out
            given = [v for v in tree_leaves((args, kwargs)) if isinstance(v, torch.Tensor)]
            if before is None:
                return answer(out, given, args, kwargs, func)
            value = answer(out, [before if v is args[0] else v for v in given],
                           (before, *args[1:]), kwargs, func)
            if value is not out:
                with torch.no_grad():
                    out.copy_(value)
            return out

    try:
        with Answer():
            return forward(model, inputs, forward_seed, copies)
    except Exception:  # noqa: BLE001 — see the docstring
        return None


def _zeroed(model, key: tuple, inputs: list, forward_seed: int, copies: bool,
            call: int | None = None) -> list | None:
    """The output with every call of site ``key`` (its ``call``-th only, where given) answered
    by zeros (``_answered``)."""
    import torch

    return _answered(model, key, inputs, forward_seed, copies,
                     lambda out, *_: torch.zeros_like(out), call)


def _single_calls(order: list, sites: dict, whole: list) -> list[tuple[tuple, int]]:
    """(site, call) pairs to zero one at a time: the calls of each site of ``order`` called
    more than once and not dead as a whole, the last first, then the first, then inward; not a
    product call with an operand the forward made exactly zero (a recurrence from a zero
    state, whose first step gives nothing by design)."""
    pairs: list[tuple[tuple, int]] = []
    for key in order:
        n = sites[key].get("calls", 1)
        if n < 2 or key in whole:
            continue
        inward, lo, hi = [], 0, n - 1
        while lo <= hi and len(inward) < CALLS_PER_SITE:
            inward.append(hi)
            if lo < hi and len(inward) < CALLS_PER_SITE:
                inward.append(lo)
            lo, hi = lo + 1, hi - 1
        zero = sites[key].get("zero_calls") or set()
        pairs += [(key, i) for i in inward if i not in zero]
    return pairs[:MOST_CALLS]


def _call_cost(sites: dict, key: tuple, call: int) -> float:
    costs = sites[key].get("call_costs") or []
    return costs[call] if 0 <= call < len(costs) else 0.0


def _rescaled(model, key: tuple, inputs: list, forward_seed: int, copies: bool) -> list | None:
    """The output with every call of site ``key`` answered by its rescaled operand times the
    least-squares scalar (the call skipped up to one factor; ``_answered``)."""
    import torch

    def skipped(out, given, args, kwargs, _func):
        main = _unnormalized(key[2], args, kwargs) if key[2] in NORMALIZED_PRODUCTS else \
            _rescaled_operand(key[2], given, out)
        if main is None or main.shape != out.shape:
            return out
        with torch.no_grad():
            # the least-squares scalar from fp64 blocks: no whole fp64 copy of either
            cross = square = 0.0
            for a, b in C._blocks64(main.detach(), out.detach()):
                cross, square = (a * b).sum() + cross, (a * a).sum() + square
            scale = float(cross) / max(float(square), 1e-300)
            return (main.detach() * scale).to(out.dtype)

    return _answered(model, key, inputs, forward_seed, copies, skipped)


def _term_dropped(model, key: tuple, inputs: list, forward_seed: int, copies: bool,
                  scales: dict) -> list | None:
    """The output with the calls of site ``key`` that ``scales`` names (call -> where its
    damped term's constant sits: a keyword or a position) made again with that constant at 0
    (the term dropped; ``_answered``)."""
    import torch

    made = [0]

    def dropped(out, _given, args, kwargs, func):
        if not out.is_floating_point():
            return out
        made[0] += 1
        scale = scales.get(made[0] - 1)
        if scale is None:
            return out
        with torch.no_grad():
            if isinstance(scale, int):
                return func(*args[:scale], 0, *args[scale + 1:], **kwargs)
            return func(*args, **{**kwargs, scale: 0})

    return _answered(model, key, inputs, forward_seed, copies, dropped)


def _dead(model, inputs, ref, forward_seed, tol, order, copies) -> list:
    """The sites of ``order`` whose zeroing keeps ``model``'s output (``ref``) within
    tolerance."""
    return [key for key in order
            if within(_zeroed(model, key, inputs, forward_seed, copies), ref, tol)]


def dead_sites(model, alt, inputs: list, ref: list, alt_ref: list | None, forward_seed: int,
               tol: float, copies: bool = True) -> tuple[list[str], int]:
    """(labels of the call sites dead on ``model`` (on ``alt`` too, the state with its
    constants drawn again whose own output is ``alt_ref``, where given; else dead at
    initialization) and of the product calls that take an exactly-zero parameter; bypasses
    tried)."""
    sites, total = _call_sites(model, inputs, forward_seed, copies)
    largest = max((e["numel"] for e in sites.values()), default=0)
    order = sorted((k for k, e in sites.items()
                    if e["ops"] > 0 and (e["operands"] >= 2 or e["damped"]) and
                    (not e["inplace"] or e["damped"]) and (
                        e["cost"] >= MIN_SHARE * total or e["numel"] >= MIN_SHARE * largest)),
                   key=lambda k: (-sites[k]["cost"], k))[:MOST_SITES]
    dead = _dead(model, inputs, ref, forward_seed, tol, order, copies)
    tried = len(order)
    both = dead
    if dead and alt is not None and alt_ref is not None:
        both = _dead(alt, inputs, alt_ref, forward_seed, tol, dead, copies)
        tried += len(order)
    redrawn = alt is not None and alt_ref is not None
    singles = _single_calls(order, sites, dead)
    if sum(_call_cost(sites, k, i) for k, i in singles) < DEAD_CALLS_SHARE * total:
        singles = []  # dead or not, together they could not carry the share that counts
    dead_calls = [(k, i) for k, i in singles
                  if within(_zeroed(model, k, inputs, forward_seed, copies, i), ref, tol)]
    tried += len(singles)
    if sum(_call_cost(sites, k, i) for k, i in dead_calls) < DEAD_CALLS_SHARE * total:
        dead_calls = []
    both_calls = dead_calls
    if dead_calls and redrawn:
        both_calls = [(k, i) for k, i in dead_calls
                      if within(_zeroed(alt, k, inputs, forward_seed, copies, i), alt_ref, tol)]
        tried += len(dead_calls)

    def label(key: tuple, why: str, call: int | None = None) -> str:
        name, line, func = key
        text = " ".join(linecache.getline(name, line).split())[:80]
        n = sites[key].get("calls", 1)
        cost = sites[key]["cost"] if call is None else _call_cost(sites, key, call)
        share = cost / total if total else 0.0
        which = f", call {call + 1} of {n}" if call is not None else ""
        return f"line {line} `{text}`: {func}{which} ({why}; {share:.0%} of the work)"

    labels = [label(k, "zeroed, constants as declared and drawn again" if redrawn else
                    "zeroed, constants as declared") for k in both]
    labels += [label(k, "zeroed, dead at initialization: live only once the constants are "
                        "drawn again") for k in dead if k not in both]
    labels += [label(k, "zeroed alone, constants as declared and drawn again" if redrawn else
                     "zeroed alone, constants as declared", i) for k, i in both_calls]
    labels += [label(k, "zeroed alone, dead at initialization: live only once the constants "
                        "are drawn again", i) for k, i in dead_calls if (k, i) not in both_calls]
    labels += [label(k, f"a product with `{e['zero']}`, exactly zero as declared: dead work "
                        "at initialization") for k, e in sorted(sites.items())
               if e["zero"] is not None and k not in dead and e["cost"] >= MIN_SHARE * total]
    def damped_share(key: tuple) -> bool:  # all its calls, or calls carrying a layer's worth
        entry = sites[key]
        return len(entry["terms"]) == entry["calls"] or \
            sum(_call_cost(sites, key, i) for i in entry["terms"]) >= DEAD_CALLS_SHARE * total

    terms = sorted((k for k, e in sites.items()
                    if e["terms"] and e["ops"] > 0 and k not in dead and damped_share(k)),
                   key=lambda k: (-sites[k]["cost"], k))[:MOST_SITES]
    tried += len(terms)

    def term_label(key: tuple) -> str:
        entry = sites[key]
        where = {str(v) if isinstance(v, str) else f"argument {v + 1}"
                 for v in entry["terms"].values()}
        calls = "" if len(entry["terms"]) == entry["calls"] else \
            f" in {len(entry['terms'])} of its {entry['calls']} calls"
        return label(key, f"its term damped by {' or '.join(sorted(where))} (at most "
                          f"{DAMPING:g}) dropped{calls}, constants as declared")

    labels += [term_label(k) for k in terms
               if within(_term_dropped(model, k, inputs, forward_seed, copies, sites[k]["terms"]),
                         ref, tol)]
    # the product an ``addmm``-like call adds, dropped in every call however it is damped (a
    # scaled, detached or expanded layer-scale on a weight): the work of the product is dead
    # where the output stays within tolerance without it
    products = sorted((k for k, e in sites.items()
                       if e["alphas"] and e["ops"] > 0 and k not in dead
                       and e["terms"] != e["alphas"] and e["cost"] >= MIN_SHARE * total),
                      key=lambda k: (-sites[k]["cost"], k))[:MOST_SITES]
    tried += len(products)
    labels += [label(k, "its product term dropped (alpha 0), constants as declared")
               for k in products
               if within(_term_dropped(model, k, inputs, forward_seed, copies, sites[k]["alphas"]),
                         ref, tol)]
    rescaling = sorted((k for k, e in sites.items()
                        if e["rescale"] and e["ops"] > 0 and k not in dead and
                        e["numel"] >= MIN_SHARE * largest),
                       key=lambda k: (-sites[k]["numel"], k))[:MOST_SITES]
    tried += len(rescaling)
    labels += [label(k, "skipped up to one factor, constants as declared: a redundant "
                        "normalization") for k in rescaling
               if within(_rescaled(model, k, inputs, forward_seed, copies), ref, tol)]
    return labels, tried
