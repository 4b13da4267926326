"""Worker-side measurements for the patterns real model code carries.

Each function takes a built model, its inputs and its reference output and returns plain numbers
and labels; ``checks.judge`` turns them into verdicts. Imports only torch, the standard library
and ``checks`` (torch inside functions).

* ``submodule_bypass``: every sub-module that computes something is bypassed in turn (its output
  replaced by zeros, or by its input where the shapes allow), on the declared parameters and on a
  state whose exactly-constant parameters are drawn again: a bypass that leaves the output within
  tolerance is a dead branch (a low-rank adapter whose second factor starts at zero, residual
  blocks under a layer-scale of 1e-6, an RMSNorm of weight 1 after a LayerNorm).
* ``constant_parameters``: each floating-point parameter or buffer that is exactly constant after
  construction (zeros, ones, a tiny layer-scale) is drawn again alone: the output must move.
* ``liveness``: which elements of each computed intermediate reach the output (a backward pass
  from a random cotangent, with piecewise-linear selections such as ReLU and max pooling passing
  their gradient densely, so only structural deadness counts): a decoder layer that returns its
  last position, or attention whose band admits one key, leaves most of its work unreachable.
  Float work counts only where torch has a FLOP formula for it (matmul, convolution,
  attention), and the live elements are united over several input draws, so data-dependent
  sparsity (a router's choice of experts) does not read as dead.
* ``exact_outputs``: integer and boolean outputs (argmax, top-k indices, comparisons) must not
  change when the float work (matmul-class ops, reductions) carries noise at the tolerance's
  scale (selections whose order among ties is unspecified also see their input moved, which
  splits exact ties), nor with the thread count.
* ``duplicate_writes``: scatter / index_put / index_copy / put writing two values to one place
  (the winner is up to the device and its threads).
* ``contrast``: the slack the tolerance's relative term gives on the output's magnitude, next to
  the output's variation across inputs (an output of 273.15 +- 0.2 graded with rtol 1e-4 leaves
  14% slack on its informative part).
* ``reduced_precision``: the output with matmul-class operands rounded to a lower precision,
  what a bf16-GEMM answer to an fp32 problem returns.
"""
from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable
from typing import Any

from . import checks as C
from .model_copy import copy_model

# Most sub-modules bypassed per state (each once or twice: zeroed, skipped), largest first.
MOST_BYPASSES = 32
# Most constant tensors drawn again one at a time.
MOST_CONSTANTS = 24


def _forward(model, inputs: list, seed: int, copies: bool = True) -> list:
    """One forward under ``seed``, detached outputs; on copies of the inputs unless ``copies``
    is false (the probe saw the forward leave its inputs alone)."""
    import torch

    from .measure import output_tensors

    args = [v.clone() if isinstance(v, torch.Tensor) else copy.deepcopy(v) for v in inputs] \
        if copies else list(inputs)
    torch.manual_seed(seed)
    with torch.no_grad():
        return output_tensors(model(*args))


def _within(out: list | None, ref: list, tol: float) -> bool:
    return out is not None and C.shapes_equal(out, ref) and C.max_error(out, ref) <= tol


# ---------------------------------------------------------------- constant parameters

def constant_tensors(model) -> list[tuple[str, Any]]:
    """(name, tensor) of every floating-point parameter and buffer whose elements all equal."""
    import torch

    found = []
    named = [*model.named_parameters(), *model.named_buffers()]
    for name, t in named:
        if not t.is_floating_point() or t.numel() == 0 or t.is_meta:
            continue
        with torch.no_grad():
            flat = t.detach().reshape(-1)
            if bool(torch.isfinite(flat[:1]).all()) and bool((flat == flat[0]).all()):
                found.append((name, t))
    return found


def redraw(t, gen) -> None:
    """Draw an exactly-constant tensor again at a similar scale: a non-zero constant ``c``
    becomes ``c * exp(N(0, 1/4))`` per element (sign and magnitude kept: a variance stays
    positive, a layer-scale of 1e-6 stays tiny); zeros become ``N(0, s^2)`` with ``s`` the
    usual ``1/sqrt(fan_in)`` of a matrix, 0.5 for a vector."""
    import torch

    with torch.no_grad():
        c = float(t.detach().reshape(-1)[0])
        noise = torch.randn(t.shape, generator=gen, dtype=torch.float32).to(t.device)
        if c != 0.0:
            t.copy_((noise * 0.5).exp_().mul_(c).to(t.dtype))
        else:
            fan_in = t.numel() // t.shape[0] if t.dim() >= 2 else 0
            scale = 1.0 / math.sqrt(fan_in) if fan_in else 0.5
            t.copy_(noise.mul_(scale).to(t.dtype))


def perturbed_constants(model, seed: int):
    """A copy of ``model`` whose exactly-constant tensors are drawn again (None: none)."""
    import torch

    alt = copy_model(model)
    constants = constant_tensors(alt)
    if not constants:
        return None
    gen = torch.Generator(device="cpu").manual_seed(seed)
    for _name, t in constants:
        redraw(t, gen)
    return alt


def constant_parameters(model, inputs: list, ref: list, forward_seed: int, tol: float,
                        seed: int, copies: bool = True) -> dict | None:
    """Each constant tensor drawn again alone (on a copy, restored after): the ones whose new
    value leaves the output within tolerance have no effect on it. None: no constant tensor."""
    import torch

    work = copy_model(model)
    constants = constant_tensors(work)
    if not constants:
        return None
    gen = torch.Generator(device="cpu").manual_seed(seed)
    unused: list[str] = []
    tried = 0
    for name, t in constants[:MOST_CONSTANTS]:
        value = float(t.detach().reshape(-1)[0])
        redraw(t, gen)
        try:
            out = _forward(work, inputs, forward_seed, copies)
        except Exception:  # noqa: BLE001 — a value the forward rejects is not an unused one
            out = None
        with torch.no_grad():
            t.fill_(value)
        tried += 1
        if out is not None and _within(out, ref, tol):
            unused.append(f"{name} (constant {value:.3g})")
    return {"tried": tried, "total": len(constants), "unused": unused}


# ---------------------------------------------------------------- sub-module bypass

class _OpCounter:
    """A TorchDispatchMode that counts compute ops and their cost (torch's FLOP formulas where
    it has one, else the output's element count) into ``self.ops`` and ``self.cost``."""

    def __new__(cls):
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils._pytree import tree_leaves
        from torch.utils.flop_counter import flop_registry

        class Counter(TorchDispatchMode):
            def __init__(self):
                super().__init__()
                self.ops = 0
                self.cost = 0.0

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                out = func(*args, **kwargs)
                name = str(func.overloadpacket)
                if C.compute_ops([name]):
                    self.ops += 1
                    packet = func.overloadpacket
                    if packet in flop_registry:
                        try:
                            self.cost += float(flop_registry[packet](*args, **kwargs,
                                                                     out_val=out))
                            return out
                        except Exception:  # noqa: BLE001, S110 — counted by size instead
                            pass
                    self.cost += sum(t.numel() for t in tree_leaves(out)
                                     if isinstance(t, torch.Tensor))
                return out

        return Counter()


def _module_calls(model, inputs: list, forward_seed: int,
                  copies: bool = True) -> tuple[dict, float]:
    """Per called sub-module (by qualified name): the compute ops and cost its calls ran
    (children included), and whether its output can be replaced by its first tensor input."""
    import torch

    counter = _OpCounter()
    calls: dict[str, dict] = {}
    handles = []
    stack: list[tuple[int, float]] = []

    def first_tensor(args, kwargs):
        for v in [*args, *kwargs.values()]:
            if isinstance(v, torch.Tensor):
                return v
        return None

    def pre(_mod, _args, _kwargs):
        stack.append((counter.ops, counter.cost))

    def post(name):
        def hook(_mod, args, kwargs, out):
            ops0, cost0 = stack.pop()
            entry = calls.setdefault(name, {"ops": 0, "cost": 0.0, "identity": True})
            entry["ops"] += counter.ops - ops0
            entry["cost"] += counter.cost - cost0
            x = first_tensor(args, kwargs)
            # an in-place module (ReLU(inplace=True)) returns its input already changed
            entry["identity"] &= (isinstance(out, torch.Tensor) and x is not None
                                  and x.shape == out.shape and x.dtype == out.dtype
                                  and x.data_ptr() != out.data_ptr())
        return hook

    for name, mod in model.named_modules():
        if not name:
            continue
        handles.append(mod.register_forward_pre_hook(pre, with_kwargs=True))
        handles.append(mod.register_forward_hook(post(name), with_kwargs=True))
    try:
        with counter:
            _forward(model, inputs, forward_seed, copies)
    finally:
        for h in handles:
            h.remove()
    return calls, counter.cost


def _zeros_like_output(out):
    import torch

    if isinstance(out, torch.Tensor):
        return torch.zeros_like(out)
    if isinstance(out, (tuple, list)):
        return type(out)(_zeros_like_output(v) for v in out) if not hasattr(out, "_fields") \
            else type(out)(*(_zeros_like_output(v) for v in out))
    if isinstance(out, dict):
        return {k: _zeros_like_output(v) for k, v in out.items()}
    return out


def _bypassed(model, name: str, how: str, inputs: list, forward_seed: int,
              copies: bool = True) -> list | None:
    """The output with sub-module ``name``'s output replaced (``zero``: zeros of its shape;
    ``identity``: its first tensor input). None when the forward then fails."""
    import torch

    mod = model.get_submodule(name)

    def hook(_mod, args, kwargs, out):
        if how == "zero":
            return _zeros_like_output(out)
        for v in [*args, *kwargs.values()]:
            if isinstance(v, torch.Tensor):
                return v
        return out

    handle = mod.register_forward_hook(hook, with_kwargs=True)
    try:
        return _forward(model, inputs, forward_seed, copies)
    except Exception:  # noqa: BLE001 — a bypass that breaks forward is not dead
        return None
    finally:
        handle.remove()


def _dead_modules(model, inputs, ref, forward_seed, tol, calls, total, skip=(),
                  copies: bool = True) -> tuple:
    """(dead labels, bypasses tried) on ``model``'s current parameters; ``ref`` is its own
    output. A module inside one already found dead is not tried again."""
    order = sorted((n for n, e in calls.items() if e["ops"] > 0 and n not in skip),
                   key=lambda n: (-calls[n]["cost"], n.count("."), n))
    dead: list[tuple[str, str]] = []
    tried = 0
    for name in order[:MOST_BYPASSES]:
        if any(name.startswith(d + ".") for d, _ in dead):
            continue
        hows = ["zero"] + (["identity"] if calls[name]["identity"] else [])
        for how in hows:
            tried += 1
            if _within(_bypassed(model, name, how, inputs, forward_seed, copies), ref, tol):
                share = calls[name]["cost"] / total if total else 0.0
                what = "zeroed" if how == "zero" else "skipped"
                dead.append((name, f"{name} ({what}; {share:.0%} of the work)"))
                break
    return dead, tried


def submodule_bypass(model, inputs: list, ref: list, forward_seed: int, tol: float,
                     seed: int, copies: bool = True) -> dict | None:
    """Dead sub-modules on the declared parameters and on the constants-redrawn state (see the
    module docstring). None when the model has no sub-module that computes something."""
    calls, total = _module_calls(model, inputs, forward_seed, copies)
    if not any(e["ops"] > 0 for e in calls.values()):
        return None
    dead, tried = _dead_modules(model, inputs, ref, forward_seed, tol, calls, total,
                                copies=copies)
    alt = perturbed_constants(model, seed)
    dead_alt: list[tuple[str, str]] = []
    if alt is not None:
        try:
            alt_ref = _forward(alt, inputs, forward_seed, copies)
        except Exception:  # noqa: BLE001 — the redrawn state breaks forward: declared only
            alt_ref = None
        if alt_ref is not None:
            # its own tolerance: the redrawn state's output may be larger than the declared one's
            dead_alt, more = _dead_modules(alt, inputs, alt_ref, forward_seed, tol, calls, total,
                                           skip={n for n, _ in dead}, copies=copies)
            tried += more
    return {"tried": tried, "modules": sum(e["ops"] > 0 for e in calls.values()),
            "dead": [label for _n, label in dead],
            "dead_redrawn": [label for _n, label in dead_alt]}


# ---------------------------------------------------------------- liveness

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


def _spread(x, out):
    """A zero-valued tensor of ``out``'s shape whose gradient reaches every element of ``x``."""
    return (x.sum() - x.sum().detach()).expand(out.shape) if out.shape else \
        (x.sum() - x.sum().detach())


def _straight_through(func, args, kwargs, out):
    """The liveness pass's replacement for a selection op's output (see ``_STRAIGHT``)."""
    import torch
    import torch.nn.functional as F

    name = getattr(func, "__name__", "")
    x = next((v for v in args if isinstance(v, torch.Tensor)), None)
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


def _live_masks(model, inputs: list, forward_seed: int, gen,
                copies: bool = True) -> list[dict] | None:
    """One liveness pass (see ``liveness``) on one input draw: per FLOP-counted call, in call
    order, its label, cost and the mask of its output elements with a non-zero gradient."""
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._pytree import tree_leaves

    counter = _FlopOnly()
    records: list[dict] = []
    sinks: list = []

    def float_grad(t) -> bool:
        return isinstance(t, torch.Tensor) and t.is_floating_point() and t.requires_grad

    class Trace(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            before = counter.cost
            if kwargs.get("inplace") and getattr(func, "__name__", "") in _STRAIGHT:
                # ReLU(inplace=True) would rewrite its input's autograd history: out of place
                kwargs = {**kwargs, "inplace": False}
            with counter:
                out = func(*args, **kwargs)
            flops = counter.cost - before
            out = _straight_through(func, args, kwargs, out)
            leaves = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
            if leaves and not any(t.is_floating_point() for t in leaves) or \
                    getattr(func, "__name__", "") in ("detach", "detach_"):
                # a float value judged only through an integer result (x > 0, argmax), or cut
                # from the gradient on purpose (a straight-through estimator's quantizer)
                sinks.extend(t for t in tree_leaves((args, kwargs)) if float_grad(t))
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
    with torch.enable_grad(), Trace():
        outs = [t for t in tree_leaves(work(*args)) if isinstance(t, torch.Tensor)]
    roots = [t for t in [*outs, *sinks] if float_grad(t)]
    if not records or not roots:
        return None
    cotangents = [torch.randn(t.shape, generator=gen, dtype=torch.float32).to(t.device, t.dtype)
                  for t in roots]
    torch.autograd.backward(roots, cotangents)
    return records


def liveness(model, draws: Iterable[list], forward_seed: int, seed: int,
             copies: bool = True) -> dict | None:
    """Which computed work reaches the output, for any of the input ``draws``: for every call
    at the Python level (a torch function, a tensor method) that runs FLOP-counted ops (matmuls,
    convolutions, attention), the fraction of its output's elements with a non-zero gradient
    from a random cotangent on the outputs in at least one draw. Float values that only feed
    integer results (a comparison, an argmax) count as reaching the output. The union over
    draws keeps data-dependent sparsity (a router's choice of experts) from reading as dead:
    what stays dead in every draw is dead by the program's structure (a slice, a fixed mask).
    Returns ``{"dead_share", "draws", "ops": [{label, share, live}]}`` or None when there is no
    FLOP-counted work under autograd."""
    import torch

    gen = torch.Generator(device="cpu").manual_seed(seed)
    union: list[dict] | None = None
    count = 0
    for inputs in draws:  # drawn one at a time: no FLOP-counted work, no second draw
        if count == 0 and not _counts_flops(model, inputs, forward_seed, copies):
            return None  # elementwise work: no backward (its activations) at all
        count += 1
        records = _live_masks(model, inputs, forward_seed, gen, copies)
        del inputs
        if records is None:
            return None
        if union is None:
            union = records
            continue
        if len(records) != len(union):  # the program changed with the data: count all live
            for entry in union:
                entry["masks"] = [torch.ones_like(m) for m in entry["masks"]]
            break
        for mine, theirs in zip(union, records):
            same = [a.shape == b.shape for a, b in zip(mine["masks"], theirs["masks"])]
            if len(mine["masks"]) != len(theirs["masks"]) or not all(same):
                mine["masks"] = [torch.ones_like(m) for m in mine["masks"]]
            else:
                mine["masks"] = [a | b for a, b in zip(mine["masks"], theirs["masks"])]
    if not union:
        return None
    total = sum(e["cost"] for e in union)
    ops = []
    for e in union:
        # a call with several outputs (attention and its averaged weights) does its work for
        # the one that reaches the output: its most-live output counts
        live = max((int(m.sum()) / m.numel() if m.numel() else 1.0 for m in e["masks"]),
                   default=1.0)
        ops.append({"label": e["label"], "share": e["cost"] / total if total else 0.0,
                    "live": live})
    dead = sum(o["share"] * (1.0 - o["live"]) for o in ops)
    return {"dead_share": dead, "draws": count, "ops": ops}


def _counts_flops(model, inputs: list, forward_seed: int, copies: bool) -> bool:
    """Whether one forward (no autograd) runs any op torch has a FLOP formula for."""
    import torch

    counter = _FlopOnly()
    with torch.no_grad(), counter:
        _forward(model, inputs, forward_seed, copies)
    return counter.cost > 0


def _marking(mask) -> Callable:
    def hook(grad):
        mask.logical_or_(grad != 0)
    return hook


class _FlopOnly:
    """A TorchDispatchMode summing torch's FLOP formulas (matmul, convolution, attention ...)
    into ``cost``; ``flop_ops_last``: whether the last ``with`` block ran any."""

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
                return out

        return Flops()


# ---------------------------------------------------------------- exact (non-float) outputs

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


class _HonestNoise:
    """A TorchDispatchMode that adds to the result of every matmul-class op and reduction
    ``rel`` times its RMS in Gaussian noise (what another summation order or a kernel within the
    tolerance makes of it), and moves the input of selections with unordered ties
    (``UNORDERED_SELECTIONS``) the same way, so exact ties split. Values that no float work
    touched (the inputs, the parameters) stay exact: a selection over them is defined."""

    def __new__(cls, rel: float, gen):
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils.flop_counter import flop_registry

        def moved(x):
            if not (isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel() > 1):
                return x
            noise = torch.randn(x.shape, generator=gen, dtype=torch.float32).to(x.device)
            rms = float(x.detach().double().pow(2).mean().sqrt())
            return (x.double() + noise.double() * (rel * rms)).to(x.dtype)

        class Noise(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                name = func.overloadpacket.__name__
                if name in UNORDERED_SELECTIONS and args:
                    args = (moved(args[0]), *args[1:])
                out = func(*args, **kwargs)
                if func.overloadpacket in flop_registry or name in REDUCTIONS:
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
        return {"changed": total, "fraction": 1.0}
    for a, b in zip(out, ref):
        if not (b.is_floating_point() or b.is_complex()):
            bad += int((a != b).sum())
    return {"changed": bad, "fraction": bad / total if total else 0.0}


def exact_outputs(model, inputs: list, ref: list, forward_seed: int, rel: float, seed: int,
                  device: str, copies: bool = True) -> dict | None:
    """Integer and boolean outputs are graded exactly: how many of their elements change (a)
    when the float work carries honest noise (``_HonestNoise`` at ``rel``, the tolerance's
    scale) and (b) on one CPU thread instead of several. None: every output is floating-point."""
    import torch

    if all(t.is_floating_point() or t.is_complex() for t in ref):
        return None
    gen = torch.Generator(device="cpu").manual_seed(seed)
    try:
        with _HonestNoise(rel, gen):
            jittered = _exact_changed(_forward(model, inputs, forward_seed, copies), ref)
    except Exception:  # noqa: BLE001 — noise the forward rejects tells nothing
        jittered = {"changed": 0, "fraction": 0.0}
    threads = None
    if not device.startswith("cuda") and torch.get_num_threads() > 1:
        before = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            threads = _exact_changed(_forward(model, inputs, forward_seed, copies), ref)
        finally:
            torch.set_num_threads(before)
    return {"jitter": rel, "jittered_changed": jittered, "threads_changed": threads,
            "outputs": [str(t.dtype).replace("torch.", "") for t in ref
                        if not (t.is_floating_point() or t.is_complex())]}


# ---------------------------------------------------------------- duplicate-index writes

def _destinations(index, dim: int, shape) -> Any:
    """Flat destinations of a scatter's ``index`` along ``dim`` into a tensor of ``shape``."""
    import torch

    lin = torch.zeros(index.shape, dtype=torch.int64, device=index.device)
    for d in range(index.dim()):
        if d == dim:
            coord = index.to(torch.int64) % max(1, shape[d])
        else:
            view = [1] * index.dim()
            view[d] = index.shape[d]
            coord = torch.arange(index.shape[d], device=index.device).view(view)
        lin = lin * shape[d] + coord
    return lin.reshape(-1)


def _repeats(lin) -> int:
    """How many destinations of ``lin`` are written more than once."""
    import torch

    if lin.numel() < 2:
        return 0
    _values, counts = torch.unique(lin, return_counts=True)
    return int((counts > 1).sum())


def _index_put_repeats(self_t, indices, values) -> int:
    import torch

    if isinstance(values, torch.Tensor) and values.numel() <= 1:
        return 0
    picked = [(d, i) for d, i in enumerate(indices) if i is not None]
    if not picked or any(i.dtype == torch.bool for _d, i in picked):
        return 0
    try:
        broadcast = torch.broadcast_tensors(*[i for _d, i in picked])
    except RuntimeError:
        return 0
    lin = torch.zeros(broadcast[0].shape, dtype=torch.int64, device=broadcast[0].device)
    for (d, _i), idx in zip(picked, broadcast):
        lin = lin * self_t.shape[d] + idx.to(torch.int64) % max(1, self_t.shape[d])
    return _repeats(lin.reshape(-1))


def _write_repeats(name: str, args: tuple, kwargs: dict) -> int:
    """Destinations written twice by one order-undefined write op (0: none, or not one)."""
    import torch

    base = name.split(".")[-1].rstrip("_")
    if base in ("index_put", "_index_put_impl"):
        accumulate = args[3] if len(args) > 3 else kwargs.get("accumulate", False)
        return 0 if accumulate else _index_put_repeats(args[0], args[1], args[2])
    if base == "index_copy":
        return _repeats(args[2].reshape(-1).to(torch.int64))
    if base == "put":
        accumulate = args[3] if len(args) > 3 else kwargs.get("accumulate", False)
        return 0 if accumulate else _repeats(args[1].reshape(-1).to(torch.int64))
    if base == "scatter":
        src = args[3] if len(args) > 3 else kwargs.get("src", kwargs.get("value"))
        if not isinstance(src, torch.Tensor) or src.numel() <= 1 or kwargs.get("reduce") \
                or len(args) > 4:
            return 0
        dim = args[1] % max(1, args[0].dim())
        return _repeats(_destinations(args[2], dim, args[0].shape))
    return 0


def duplicate_writes(model, inputs: list, forward_seed: int, copies: bool = True) -> list[str]:
    """Each write op of one forward (index_put, index_copy, scatter with a source, put) that
    writes more than one value to one place, as ``"<op>: N place(s) written twice or more"``."""
    from torch.utils._python_dispatch import TorchDispatchMode

    found: dict[str, int] = {}

    class Writes(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            name = str(func.overloadpacket)
            try:
                repeats = _write_repeats(name, args, kwargs)
            except Exception:  # noqa: BLE001 — unreadable indices are not judged
                repeats = 0
            if repeats:
                found[name] = found.get(name, 0) + repeats
            return func(*args, **kwargs)

    with Writes():
        _forward(model, inputs, forward_seed, copies)
    return [f"{name.replace('aten.', '')}: {n} place(s) written more than once"
            for name, n in found.items()]


# ---------------------------------------------------------------- contrast

def contrast(ref: list, alt: list, tol: float) -> list[dict]:
    """Per float output present in both input draws: its informative scale, the RMS of its
    change between the two draws over sqrt(2) (the spread of one element across inputs: the
    part a constant offset does not carry), its typical magnitude (median |y|) and ``ratio``,
    the slack the tolerance's relative term gives on that magnitude (``tol * median |y|``) over
    the informative scale."""
    import torch

    found = []
    for k, (y, z) in enumerate(zip(ref, alt)):
        if not y.is_floating_point() or y.shape != z.shape or y.numel() == 0:
            continue
        square = count = 0.0
        for a, b in C._blocks64(y, z):
            d = (a - b)[torch.isfinite(a - b)]
            square += float((d * d).sum())
            count += d.numel()
        sample = C._as64(C._sample(C._flat(y))).abs()
        sample = sample[torch.isfinite(sample)]
        if not count or not sample.numel():
            continue
        informative = math.sqrt(square / count / 2.0)
        magnitude = float(sample.median())
        found.append({"output": k, "informative": informative, "magnitude": magnitude,
                      "ratio": tol * magnitude / informative if informative > 0 else math.inf})
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
        out = _forward(model, inputs, forward_seed, copies)
    return out if rounded[0] else None
