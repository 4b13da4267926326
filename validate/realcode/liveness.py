"""``liveness``: which elements of each computed intermediate reach the output (a backward pass
from a random cotangent, selections passing their gradient densely, so only structural deadness
counts), united over several input draws."""
from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterable

from ..model_copy import copy_model
from .common import extra_flops, forward

# Selections whose gradient is zero where they did not select (ReLU's negatives, the pooled
# window's non-maxima): data-dependent, not dead work. In the liveness pass they pass their
# gradient densely (straight-through), so only structural deadness (slices, masks) remains.
_STRAIGHT = frozenset({
    "relu", "relu_", "relu6", "hardtanh", "hardtanh_", "threshold", "threshold_", "clamp",
    "clamp_", "clip", "clip_", "clamp_min", "clamp_min_", "clamp_max", "clamp_max_", "round",
    "floor", "ceil", "trunc", "sign", "frac", "hardshrink", "softshrink", "where",
})
_POOLS = {"max_pool1d": "avg_pool1d", "max_pool2d": "avg_pool2d", "max_pool3d": "avg_pool3d",
          "adaptive_max_pool1d": "adaptive_avg_pool1d",
          "adaptive_max_pool2d": "adaptive_avg_pool2d",
          "adaptive_max_pool3d": "adaptive_avg_pool3d"}
_REDUCTIONS = frozenset({"max", "min", "amax", "amin", "median", "nanmedian", "kthvalue", "mode",
                         "cummax", "cummin", "logsumexp"})


# A tensor's truth tested on the host: the result steers control flow only (a guard)
_TRUTH_TESTS = frozenset({"__bool__", "is_nonzero", "__nonzero__"})


def _spread(x, out):
    """A zero-valued tensor of ``out``'s shape whose gradient reaches every element of ``x``."""
    return (x.sum() - x.sum().detach()).expand(out.shape) if out.shape else \
        (x.sum() - x.sum().detach())


def _underived(out) -> bool:
    """Does ``out`` (a tensor, or a tuple of them) hold a result whose backward autograd does
    not implement?"""
    import torch
    from torch.utils._pytree import tree_leaves

    return any(isinstance(t, torch.Tensor) and t.grad_fn is not None and
               type(t.grad_fn).__name__ == "NotImplemented" for t in tree_leaves(out))


def _reached(t, sources: list):
    """``t``'s values, with a gradient that reaches every element of ``sources``."""
    if not t.is_floating_point():
        return t.detach()
    value = t.detach()
    for x in sources:
        value = value + _spread(x, value)
    return value


def _straight_through(func, args, kwargs, out):
    """The liveness pass's replacement for a selection op's output (see ``_STRAIGHT``), and
    for one autograd cannot differentiate (``_underived``)."""
    import torch
    import torch.nn.functional as F
    from torch.utils._pytree import tree_leaves, tree_map

    name = getattr(func, "__name__", "")
    x = next((v for v in args if isinstance(v, torch.Tensor)), None)
    if name == "bincount" and isinstance(out, torch.Tensor) and out.is_floating_point():
        # weights summed into bins: the same sum made by ``index_add``, whose gradient
        # reaches each weight from its own bin (a weight in a bin nobody reads is dead)
        weights = args[1] if len(args) > 1 else kwargs.get("weights")
        if isinstance(weights, torch.Tensor) and weights.requires_grad and x is not None:
            rebuilt = torch.zeros(out.shape, dtype=weights.dtype, device=out.device
                                  ).index_add(0, x.reshape(-1), weights.reshape(-1))
            return out.detach() + (rebuilt - rebuilt.detach()).to(out.dtype)
    if _underived(out):
        # an op without a derivative (a histogram, a bincount not rebuilt above): its
        # backward would raise and leave the pass unmeasured; every element of its float
        # inputs reaches it
        sources = [v for v in tree_leaves((args, kwargs)) if isinstance(v, torch.Tensor)
                   and v.is_floating_point() and v.requires_grad]
        return tree_map(lambda t: _reached(t, sources) if _underived(t) else t, out)
    if name in _STRAIGHT and isinstance(out, torch.Tensor) and x is not None \
            and x.shape == out.shape and out.is_floating_point() and x.requires_grad:
        return x + (out - x).detach()
    if name in _POOLS and x is not None and x.requires_grad:
        pooled = out[0] if isinstance(out, tuple) else out
        kernel = args[1] if len(args) > 1 else kwargs.get("kernel_size",
                                                          kwargs.get("output_size"))
        try:
            if name.startswith("adaptive"):
                avg = getattr(F, _POOLS[name])(x, kernel)
            else:
                stride = args[2] if len(args) > 2 else kwargs.get("stride")
                padding = args[3] if len(args) > 3 else kwargs.get("padding", 0)
                avg = getattr(F, _POOLS[name])(x, kernel, stride, padding,
                                               ceil_mode=bool(kwargs.get("ceil_mode", False)))
            if avg.shape == pooled.shape:
                pooled = avg + (pooled - avg).detach()
            else:
                pooled = pooled.detach() + _spread(x, pooled)
        except Exception:  # noqa: BLE001 — fall back to a gradient that reaches all of x
            pooled = pooled.detach() + _spread(x, pooled)
        return (pooled, *out[1:]) if isinstance(out, tuple) else pooled
    if name in _REDUCTIONS and x is not None and x.requires_grad and x.is_floating_point():
        if isinstance(out, torch.Tensor):
            return out.detach() + _spread(x, out) if out.is_floating_point() else out
        if isinstance(out, tuple) and out and isinstance(out[0], torch.Tensor):
            values = out[0].detach() + _spread(x, out[0])
            return type(out)((values, *out[1:])) if not hasattr(out, "_fields") else \
                type(out)(values, *out[1:])
    return out


def _live_masks(model, inputs: list, forward_seed: int, gen, copies: bool = True,
                keep_saved: bool = False, plain: bool = False) -> list[dict] | None:
    """One liveness pass (see ``liveness``) on one input draw: per FLOP-counted call, in call
    order, its label, cost and the mask of its output elements with a non-zero gradient. A
    backward refused for a saved tensor forward rewrote in place runs again ``keep_saved``; a
    forward that breaks with autograd held on and ``detach`` passed through (an ``out=`` call, a
    ``.numpy()`` of what it detached) runs again ``plain``, its own switches obeyed."""
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._pytree import tree_leaves

    counter = _FlopOnly()
    records: list[dict] = []
    sinks: list = []  # float values judged through integer results that reach the output
    # float values judged only through an integer or boolean result (x > 0, argmax): roots only
    # where that result, or what is derived from it, reaches a float result, an output or a
    # value read on the host (an index, a mask, ``where``, ``int(t.argmax())``); one only truth-
    # tested on the host (``if isinf(h).any():``, a guard) is none
    judged: list[dict] = []  # {"sinks": [...], "used": bool}
    derived: dict[int, tuple] = {}  # id of a tracked integer result -> (its entry, the tensor)

    def float_grad(t) -> bool:  # a real or complex floating-point value autograd follows
        return isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex()) and \
            t.requires_grad

    class Trace(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            before = counter.cost
            if kwargs.get("inplace") and getattr(func, "__name__", "") in _STRAIGHT:
                # ReLU(inplace=True) would rewrite its input's autograd history: out of place
                kwargs = {**kwargs, "inplace": False}
            name = getattr(func, "__name__", "")
            if not plain and name in ("detach", "detach_") and args and float_grad(args[0]):
                # cut from the gradient on purpose (a frozen backbone's features, a
                # straight-through estimator's quantizer): passed through (a copy, which
                # forward may then rewrite in place), so what is cut reaches the output
                # only where its value does
                return args[0].clone() if name == "detach" else args[0]
            with counter:
                out = func(*args, **kwargs)
            flops = counter.cost - before
            out = _straight_through(func, args, kwargs, out)
            leaves = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
            given = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
            floats = any(t.is_floating_point() or t.is_complex() for t in leaves)
            tracked = [t for t in given if id(t) in derived]
            # a single truth value about a whole tensor (``isinf(h).any()``) steers a choice
            # between constants on the device as a host truth test does (a guard): it makes
            # nothing live by itself
            guard = bool(tracked) and all(t.dtype == torch.bool and t.numel() == 1
                                          for t in tracked)
            for entry in {id(e): e for e in (derived[id(t)][0] for t in tracked)}.values():
                # what this op made of an integer result tracked so far
                if (floats and not guard) or (not leaves and name not in _TRUTH_TESTS):
                    entry["used"] = True  # a float result, or a value read on the host
                elif not floats:
                    derived.update((id(t), (entry, t)) for t in leaves)
            if leaves and not floats and any(float_grad(t) for t in given):
                entry = {"sinks": [t for t in given if float_grad(t)], "used": False}
                judged.append(entry)
                derived.update((id(t), (entry, t)) for t in leaves)
            if flops > 0 and counter.flop_ops_last:
                grads = [t for t in leaves if float_grad(t)]
                if grads:
                    entry = {"label": getattr(func, "__name__", str(func)), "cost": flops,
                             "masks": [torch.zeros(t.shape, dtype=torch.bool, device=t.device)
                                       for t in grads]}
                    records.append(entry)
                    for mask, t in zip(entry["masks"], grads):
                        t.register_hook(_marking(mask))
            return out

    work = copy_model(model)
    args = []
    for v in inputs:
        if isinstance(v, torch.Tensor) and v.is_floating_point():
            leaf = v.detach()
            args.append((leaf.clone() if copies else leaf).requires_grad_(True))
        elif copies:
            args.append(v.clone() if isinstance(v, torch.Tensor) else copy.deepcopy(v))
        else:
            args.append(v)
    torch.manual_seed(forward_seed)
    # a forward's own ``no_grad``/``inference_mode`` (a frozen backbone) would hide its work
    # from the pass: held on; saved tensors kept as saved (``keep_saved``) where forward
    # rewrites one in place (``x /= x.norm()``), which the backward would refuse
    held = contextlib.nullcontext() if plain else _grad_held_on()
    try:
        with torch.enable_grad(), held, _saved_kept(keep_saved), Trace():
            outs = [t for t in tree_leaves(work(*args)) if isinstance(t, torch.Tensor)]
    except Exception:
        if plain:
            raise
        del work, args, records, sinks, judged, derived
        return _live_masks(model, inputs, forward_seed, gen, copies, keep_saved, plain=True)
    for t in outs:
        if id(t) in derived:
            derived[id(t)][0]["used"] = True
    for entry in judged:
        if entry["used"]:
            sinks.extend(entry["sinks"])
    roots = [t for t in [*outs, *sinks] if float_grad(t)]
    if not records or not roots:
        return None
    state = gen.get_state()
    cotangents = [torch.randn(t.shape, generator=gen, dtype=torch.float32).to(t.device, t.dtype)
                  for t in roots]
    try:
        torch.autograd.backward(roots, cotangents)
    except RuntimeError as exc:
        if keep_saved or "inplace operation" not in str(exc):
            raise
        del records, outs, roots, cotangents, work, args, sinks, judged, derived
        gen.set_state(state)
        return _live_masks(model, inputs, forward_seed, gen, copies, keep_saved=True,
                           plain=plain)
    return records


@contextlib.contextmanager
def _grad_held_on():
    """Python's switches of autograd (``no_grad``, ``set_grad_enabled``, ``inference_mode``)
    left without effect for the pass."""
    import torch

    class _NoInference:
        def __init__(self, *args, **kwargs):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    saved = torch._C._set_grad_enabled, torch._C._InferenceMode
    torch._C._set_grad_enabled = lambda mode: None
    torch._C._InferenceMode = _NoInference
    try:
        yield
    finally:
        torch._C._set_grad_enabled, torch._C._InferenceMode = saved


def _saved_kept(keep: bool):
    """Saved tensors copied as autograd saves them (``keep``): a rewrite in place after that
    changes the copy's original only."""
    import torch

    if not keep:
        return contextlib.nullcontext()
    return torch.autograd.graph.saved_tensors_hooks(lambda t: t.clone(), lambda t: t)


def liveness(model, draws: Iterable[list], forward_seed: int, seed: int,
             copies: bool = True) -> dict | None:
    """Which computed work reaches the output, for any of the input ``draws``: for every call
    at the Python level (a torch function, a tensor method) that runs FLOP-counted ops (matmuls,
    convolutions, attention), the fraction of its output's elements with a non-zero gradient
    from a random cotangent on the outputs in at least one draw. Float values that only feed
    integer results (a comparison, an argmax) count as reaching the output. The union over
    draws keeps data-dependent sparsity (a router's choice of experts) from reading as dead:
    what stays dead in every draw is dead by the program's structure (a slice, a fixed mask).
    Where the calls themselves change with the data (the experts a router sends tokens to),
    each draw is accounted alone and the least dead decides (``calls_changed``). Forward's own
    ``no_grad`` and ``detach`` do not hide work from the pass.
    Returns ``{"dead_share", "sliced_share", "draws", "ops": [{label, share, live, sliced}]}``
    (``sliced``: the share of a call's output in whole dead slices, ``_dead_slices``) or None
    when there is no FLOP-counted work under autograd."""
    import torch

    gen = torch.Generator(device="cpu").manual_seed(seed)
    union: list[dict] | None = None
    own: list[dict] = []  # each draw's own account, for a program that changes with the data
    count = 0
    for inputs in draws:  # drawn one at a time: no FLOP-counted work, no second draw
        if count == 0 and not _counts_flops(model, inputs, forward_seed, copies):
            return None  # elementwise work: no backward (its activations) at all
        count += 1
        records = _live_masks(model, inputs, forward_seed, gen, copies)
        del inputs
        if records is None:
            return None
        own.append(_account(records))
        if union is None:
            union = records
        elif len(records) != len(union) or not all(
                len(a["masks"]) == len(b["masks"])
                and all(x.shape == y.shape for x, y in zip(a["masks"], b["masks"]))
                for a, b in zip(union, records)):
            # the calls changed with the data (the experts a router hit, tokens gathered for
            # each): no call to unite with its own; each draw's account stands alone, the
            # least dead deciding
            union = []
        elif union:
            for mine, theirs in zip(union, records):
                mine["masks"] = [a | b for a, b in zip(mine["masks"], theirs["masks"])]
    if not own:
        return None
    if union:
        return {**_account(union), "draws": count}
    least = min(own, key=lambda a: a["dead_share"])
    return {**least, "sliced_share": min(a["sliced_share"] for a in own), "draws": count,
            "calls_changed": True}


def _account(records: list[dict]) -> dict:
    """``dead_share``, ``sliced_share`` and ``ops`` of one liveness account (see
    ``liveness``)."""
    total = sum(e["cost"] for e in records)
    ops = []
    for e in records:
        # a call with several outputs (attention and its averaged weights) does its work for
        # the one that reaches the output: its most-live output counts
        mask = max(e["masks"], key=lambda m: int(m.sum()) / m.numel() if m.numel() else 1.0,
                   default=None)
        live = int(mask.sum()) / mask.numel() if mask is not None and mask.numel() else 1.0
        ops.append({"label": e["label"], "share": e["cost"] / total if total else 0.0,
                    "live": live, "sliced": _dead_slices(mask)})
    dead = sum(o["share"] * (1.0 - o["live"]) for o in ops)
    sliced = sum(o["share"] * o["sliced"] for o in ops)
    return {"dead_share": dead, "sliced_share": sliced, "ops": ops}


def _dead_slices(mask) -> float:
    """The largest share of ``mask``'s elements that whole dead slices along one dimension
    hold (channels sliced away, positions never returned): work a kernel skips for nothing,
    unlike a causal triangle's, where every row and column keeps a live element."""
    if mask is None or mask.dim() == 0 or not mask.numel():
        return 0.0
    worst = 0.0
    for d in range(mask.dim()):
        if mask.shape[d] < 2:
            continue
        others = [k for k in range(mask.dim()) if k != d]
        alive = mask.any(dim=others) if others else mask
        worst = max(worst, 1.0 - int(alive.sum()) / alive.numel())
    return worst


def _counts_flops(model, inputs: list, forward_seed: int, copies: bool) -> bool:
    """Whether one forward (no autograd) runs any op torch has a FLOP formula for."""
    import torch

    counter = _FlopOnly()
    with torch.no_grad(), counter:
        forward(model, inputs, forward_seed, copies)
    return counter.cost > 0


def _marking(mask) -> Callable:
    def hook(grad):
        mask.logical_or_(grad != 0)
    return hook


class _FlopOnly:
    """A TorchDispatchMode summing torch's FLOP formulas (matmul, convolution, attention ...)
    and ``extra_flops`` (matrix-vector products, distances, FFTs, bags of embeddings) into
    ``cost``; ``flop_ops_last``: whether the last ``with`` block ran any."""

    def __new__(cls):
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils.flop_counter import flop_registry

        class Flops(TorchDispatchMode):
            def __init__(self):
                super().__init__()
                self.cost = 0.0
                self.flop_ops_last = False

            def __enter__(self):
                self.flop_ops_last = False
                return super().__enter__()

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                out = func(*args, **kwargs)
                packet = func.overloadpacket
                if packet in flop_registry:
                    try:
                        self.cost += float(flop_registry[packet](*args, **kwargs, out_val=out))
                        self.flop_ops_last = True
                    except Exception:  # noqa: BLE001, S110 — uncounted
                        pass
                else:
                    flops = extra_flops(packet, args, out)
                    if flops:
                        self.cost += flops
                        self.flop_ops_last = True
                return out

        return Flops()
