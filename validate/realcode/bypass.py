"""``submodule_bypass``: every sub-module that computes something is bypassed in turn (its output
replaced by zeros, or by its input where the shapes allow), on the declared parameters and on a
state whose exactly-constant parameters are drawn again: a bypass that leaves the output within
tolerance is a dead branch. The costliest are tried, and then the quietest of the rest: those
that barely move their input (a cheap adapter behind a layer-scale of 1e-6). The same bypass per call site of the problem's own source
(``sites``) finds dead code that no sub-module holds."""
from __future__ import annotations

from .. import checks as C
from .common import extra_flops, forward, within
from .constants import perturbed_constants

# Most sub-modules bypassed per state (each once or twice: zeroed, skipped), largest first.
MOST_BYPASSES = 32
# ... and besides those, at most this many of the rest whose output differs from their input by
# under ``QUIET_CHANGE`` of its size (a branch behind a layer-scale of 1e-6, however cheap),
# quietest first: an honest residual branch moves its input by far more
MOST_QUIET = 8
QUIET_CHANGE = 1e-3


class _OpCounter:
    """A TorchDispatchMode that counts compute ops and their cost (torch's FLOP formulas where
    it has one, or ``extra_flops``, else the output's element count) into ``self.ops`` and
    ``self.cost``."""

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
                self.paused = False  # the counter's own measurements are not counted

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                out = func(*args, **kwargs)
                if self.paused:
                    return out
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
                    flops = extra_flops(packet, args, out)
                    if flops:
                        self.cost += flops
                        return out
                    self.cost += sum(t.numel() for t in tree_leaves(out)
                                     if isinstance(t, torch.Tensor))
                return out

        return Counter()


def _module_calls(model, inputs: list, forward_seed: int,
                  copies: bool = True) -> tuple[dict, float]:
    """Per called sub-module (by qualified name): the compute ops and cost its calls ran
    (children included), whether its output can be replaced by its first tensor input, and
    then how far it moves that input (``change``: the largest over its calls of
    ``|out - input| / |out|``)."""
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
            if entry["identity"] and out.is_floating_point():
                counter.paused = True
                try:
                    # (in float32 at least, no float64 copy: a 1e-3 bar needs no more)
                    work = out.detach() if out.dtype in (torch.float32, torch.float64) \
                        else out.detach().float()
                    size = float(torch.linalg.vector_norm(work))
                    moved = float(torch.linalg.vector_norm(work - x.detach().to(work.dtype)))
                    del work
                finally:
                    counter.paused = False
                change = moved / size if size > 0 else float("inf")
                entry["change"] = max(entry.get("change", 0.0), change)
        return hook

    for name, mod in model.named_modules():
        if not name:
            continue
        handles.append(mod.register_forward_pre_hook(pre, with_kwargs=True))
        handles.append(mod.register_forward_hook(post(name), with_kwargs=True))
    try:
        with counter:
            forward(model, inputs, forward_seed, copies)
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
                return v.clone()  # a later in-place op must not write into the module's input
        return out

    handle = mod.register_forward_hook(hook, with_kwargs=True)
    try:
        return forward(model, inputs, forward_seed, copies)
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
    quiet = sorted((n for n in order[MOST_BYPASSES:]
                    if calls[n].get("change", float("inf")) < QUIET_CHANGE),
                   key=lambda n: (calls[n]["change"], n))[:MOST_QUIET]
    dead: list[tuple[str, str]] = []
    tried = 0
    for name in order[:MOST_BYPASSES] + quiet:
        if any(name.startswith(d + ".") for d, _ in dead):
            continue
        hows = ["zero"] + (["identity"] if calls[name]["identity"] else [])
        for how in hows:
            tried += 1
            if within(_bypassed(model, name, how, inputs, forward_seed, copies), ref, tol):
                share = calls[name]["cost"] / total if total else 0.0
                what = "zeroed" if how == "zero" else "skipped"
                dead.append((name, f"{name} ({what}; {share:.0%} of the work)"))
                break
    return dead, tried


def submodule_bypass(model, inputs: list, ref: list, forward_seed: int, tol: float,
                     seed: int, copies: bool = True) -> dict | None:
    """Dead sub-modules on the declared parameters and on the constants-redrawn state (see the
    module docstring), and dead call sites of the problem's own lines (``sites.dead_sites``).
    None when neither a sub-module nor a line of the source computes something."""
    from .sites import dead_sites

    calls, total = _module_calls(model, inputs, forward_seed, copies)
    modules = any(e["ops"] > 0 for e in calls.values())
    dead, tried = _dead_modules(model, inputs, ref, forward_seed, tol, calls, total,
                                copies=copies) if modules else ([], 0)
    alt = perturbed_constants(model, seed)
    alt_ref = None
    dead_alt: list[tuple[str, str]] = []
    if alt is not None:
        try:
            alt_ref = forward(alt, inputs, forward_seed, copies)
        except Exception:  # noqa: BLE001 — the redrawn state breaks forward: declared only
            alt_ref = None
        if alt_ref is not None and modules:
            # its own tolerance: the redrawn state's output may be larger than the declared one's
            dead_alt, more = _dead_modules(alt, inputs, alt_ref, forward_seed, tol, calls, total,
                                           skip={n for n, _ in dead}, copies=copies)
            tried += more
    sites, more = dead_sites(model, alt if alt_ref is not None else None, inputs, ref, alt_ref,
                             forward_seed, tol, copies)
    tried += more
    if not modules and not more:
        return None
    return {"tried": tried, "modules": sum(e["ops"] > 0 for e in calls.values()),
            "dead": [label for _n, label in dead],
            "dead_redrawn": [label for _n, label in dead_alt], "dead_sites": sites}
