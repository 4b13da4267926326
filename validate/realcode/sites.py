"""``dead_sites``: dead code that no sub-module holds. Every torch call made from a line of the
problem's own source (the line and the function called there; a sub-module's internals count at
the line that called the sub-module) that computes something is bypassed in turn, in every call
that line makes: its result replaced by zeros. A bypass that leaves the output within tolerance on
the declared parameters and on the state whose exactly-constant parameters are drawn again is
dead: a residual branch scaled by a layer-scale of 1e-6 written inline. Requiring both states
keeps a multiplication by a weight of ones or an added zero bias (live once drawn again) out.
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


def _site(depth: int = 2) -> tuple[str, int] | None:
    """(file, line) of the innermost frame of the problem's own source above the caller."""
    frame = sys._getframe(depth)
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith(SOURCE_PREFIX):
            return name, frame.f_lineno
        frame = frame.f_back
    return None


def _call_sites(model, inputs: list, forward_seed: int, copies: bool) -> tuple[dict, float]:
    """Per call site (file, line, function): the compute ops and cost its calls ran, whether
    a call wrote into (or returned) one of its arguments, and the most tensor arguments a call
    took."""
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._pytree import tree_leaves

    from .bypass import _OpCounter

    counter = _OpCounter()
    sites: dict[tuple, dict] = {}

    class Sites(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            ops, cost = counter.ops, counter.cost
            out = func(*args, **kwargs)
            where = _site()
            if where is not None and isinstance(out, torch.Tensor) and out.is_floating_point():
                entry = sites.setdefault((*where, getattr(func, "__name__", str(func))),
                                         {"ops": 0, "cost": 0.0, "numel": 0, "inplace": False,
                                          "operands": 0})
                entry["ops"] += counter.ops - ops
                entry["cost"] += counter.cost - cost
                given = [v for v in tree_leaves((args, kwargs)) if isinstance(v, torch.Tensor)]
                storage = out.untyped_storage().data_ptr()
                entry["inplace"] |= any(v.untyped_storage().data_ptr() == storage for v in given)
                entry["numel"] += out.numel()
                entry["operands"] = max(entry["operands"], len(given))
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
    """(labels of the call sites dead on ``model`` and, where given, on ``alt``, the state with
    its constants drawn again, whose own output is ``alt_ref``; bypasses tried)."""
    sites, total = _call_sites(model, inputs, forward_seed, copies)
    largest = max((e["numel"] for e in sites.values()), default=0)
    order = sorted((k for k, e in sites.items()
                    if e["ops"] > 0 and e["operands"] >= 2 and not e["inplace"] and (
                        e["cost"] >= MIN_SHARE * total or e["numel"] >= MIN_SHARE * largest)),
                   key=lambda k: (-sites[k]["cost"], k))[:MOST_SITES]
    dead = _dead(model, inputs, ref, forward_seed, tol, order, copies)
    tried = len(order)
    if dead and alt is not None and alt_ref is not None:
        dead = _dead(alt, inputs, alt_ref, forward_seed, tol, dead, copies)
        tried += len(order)
    states = "as declared and drawn again" if alt is not None and alt_ref is not None else \
        "as declared"
    labels = []
    for name, line, func in dead:
        text = " ".join(linecache.getline(name, line).split())[:80]
        share = sites[(name, line, func)]["cost"] / total if total else 0.0
        labels.append(f"line {line} `{text}`: {func} (zeroed, constants {states}; "
                      f"{share:.0%} of the work)")
    return labels, tried
