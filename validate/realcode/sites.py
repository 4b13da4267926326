"""``dead_sites``: dead code that no sub-module holds. Every torch call made from a line of the
problem's own source (the line and the function called there; a sub-module's internals count at
the line that called the sub-module) that computes something is bypassed in turn, in every call
that line makes: its result replaced by zeros. A bypass that leaves the output within tolerance is
dead: in both states, a residual branch scaled by a layer-scale of 1e-6 written inline; on the
declared parameters alone, work killed by its initialization (a functional low-rank adapter whose
second factor starts at zero adds exactly 0), which any answer to the problem as written may skip
(zeroing, unlike skipping, leaves a multiplication by a weight of ones or an added zero bias
live: none of the 97 seeds nor the healthy fixtures has such a site). A matrix product,
convolution or attention call with an operand that is a parameter or buffer exactly zero as
declared is dead work at initialization too, whatever the call's result (a query projection whose
weight starts at zero gives its bias: the product can be skipped).
Skipping a call (its first argument for its result) is not tried: code a later step makes
irrelevant by design, such as a softmax's max subtraction, would read as dead. Calls that write
into an argument (``masked_fill_``) are not tried either (their effect is already made), and sites
of under ``MIN_SHARE`` of the work, or that combine no two tensors (an epsilon or another
constant added to one, a function of one tensor), are not tried: dead work is a branch that
meets the rest, a scaled one, a second normalization."""
from __future__ import annotations

import linecache
import sys

from .common import forward, within

# Most call sites zeroed per state, largest first.
MOST_SITES = 24
# Sites carrying less of the forward's work (its FLOPs, or for elementwise work the elements
# written, against the largest site's) are not tried: an epsilon added to a row statistic is
# within tolerance by design and costs a kernel nothing to keep
MIN_SHARE = 0.01
SOURCE_PREFIX = "<kernelmill-"  # the file names ``measure.load_namespace`` gives a source
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

    class Sites(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            ops, cost = counter.ops, counter.cost
            out = func(*args, **kwargs)
            where = _site()
            if where is not None and isinstance(out, torch.Tensor) and out.is_floating_point():
                name = getattr(func, "__name__", str(func))
                entry = sites.setdefault((*where, name),
                                         {"ops": 0, "cost": 0.0, "numel": 0, "inplace": False,
                                          "operands": 0, "zero": None})
                entry["ops"] += counter.ops - ops
                entry["cost"] += counter.cost - cost
                given = [v for v in tree_leaves((args, kwargs)) if isinstance(v, torch.Tensor)]
                storage = out.untyped_storage().data_ptr()
                entry["inplace"] |= any(v.untyped_storage().data_ptr() == storage for v in given)
                entry["numel"] += out.numel()
                entry["operands"] = max(entry["operands"], len(given))
                if name in PRODUCT_CALLS and zeros and entry["zero"] is None:
                    for v in given:  # still zero here (a buffer the forward fills is not)
                        held = zeros.get(v.untyped_storage().data_ptr())
                        if held is not None and v.is_floating_point() and not bool(v.any()):
                            entry["zero"] = held
                            break
            return out

    with counter, Sites():
        forward(model, inputs, forward_seed, copies)
    return sites, counter.cost


def _zeroed(model, key: tuple, inputs: list, forward_seed: int, copies: bool) -> list | None:
    """The output with every call of site ``key`` answered by zeros. None when the forward
    then fails."""
    import torch
    from torch.overrides import TorchFunctionMode

    class Bypass(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            where = _site()
            if where is None or (*where, getattr(func, "__name__", str(func))) != key or \
                    not isinstance(out, torch.Tensor):
                return out
            return torch.zeros_like(out)

    try:
        with Bypass():
            return forward(model, inputs, forward_seed, copies)
    except Exception:  # noqa: BLE001 — a bypass that breaks forward is not dead
        return None


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
                    if e["ops"] > 0 and e["operands"] >= 2 and not e["inplace"] and (
                        e["cost"] >= MIN_SHARE * total or e["numel"] >= MIN_SHARE * largest)),
                   key=lambda k: (-sites[k]["cost"], k))[:MOST_SITES]
    dead = _dead(model, inputs, ref, forward_seed, tol, order, copies)
    tried = len(order)
    both = dead
    if dead and alt is not None and alt_ref is not None:
        both = _dead(alt, inputs, alt_ref, forward_seed, tol, dead, copies)
        tried += len(order)
    redrawn = alt is not None and alt_ref is not None

    def label(key: tuple, why: str) -> str:
        name, line, func = key
        text = " ".join(linecache.getline(name, line).split())[:80]
        share = sites[key]["cost"] / total if total else 0.0
        return f"line {line} `{text}`: {func} ({why}; {share:.0%} of the work)"

    labels = [label(k, "zeroed, constants as declared and drawn again" if redrawn else
                    "zeroed, constants as declared") for k in both]
    labels += [label(k, "zeroed, dead at initialization: live only once the constants are "
                        "drawn again") for k in dead if k not in both]
    labels += [label(k, f"a product with `{e['zero']}`, exactly zero as declared: dead work "
                        "at initialization") for k, e in sorted(sites.items())
               if e["zero"] is not None and k not in dead and e["cost"] >= MIN_SHARE * total]
    return labels, tried
