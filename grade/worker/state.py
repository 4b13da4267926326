"""Model states the trials run under (T-18): states re-drawn from the constructor's.

A kernel can be right only on the parameters the grader's constructors draw: norm weights of
exactly 1 and biases of 0 (an affine step dropped), or the weights the candidate's own
``__init__`` drew (a copy folded there, or at the first call, never goes stale). Every trial runs
under a re-drawn state (``perturbed_model_state``), loaded into both models at construction, and
one trial under another, loaded between two calls of the same model instance in place
(``StateSlots``): such a kernel is wrong on some trial.
"""
from __future__ import annotations

import torch

from .guards.originals import _tensor_copy

# A re-drawn tensor keeps its original's mean and spread; a constant one (norm weights of 1,
# biases of 0, running variances of 1) is spread by this share of its magnitude (at least 1),
# so that an answer which treats the constant as known is off by far more than a tolerance.
STD_FLOOR = 0.2


def perturbed_state(state: dict, seed: int, parameters: frozenset = frozenset()) -> dict:
    """``state`` with every floating-point tensor re-drawn from N(its mean, its std) (the std
    floored, ``STD_FLOOR``), from a generator of ``seed`` alone. Kept as they are: integer,
    boolean and complex tensors (counters, indices), tensors with a value that is not finite,
    and buffers (names not in ``parameters``) that look like masks: two distinct values (a
    causal ``tril`` of ones). A tensor whose values are all non-negative stays so (running
    variances, scales under a ``sqrt`` or ``log``)."""
    generators: dict = {}  # one per device the tensors are on (a GPU draws in milliseconds)
    out = {}
    for name, value in state.items():
        if not isinstance(value, torch.Tensor) or not value.is_floating_point() or \
                value.numel() == 0 or not bool(torch.isfinite(value).all()) or \
                (name not in parameters and _two_valued(value)):
            out[name] = value
            continue
        # float32 draws (float64 for a float64 tensor): a large model's state is drawn in
        # about a second on a host core, and a float64 copy of it would double its memory
        work = torch.float64 if value.dtype == torch.float64 else torch.float32
        x = value.detach().to(work)
        mean = float(x.mean(dtype=torch.float64))
        std = float(x.std()) if x.numel() > 1 else 0.0
        std = max(std, STD_FLOOR * max(1.0, abs(mean)))
        device = value.device
        if device not in generators:
            generators[device] = torch.Generator(device=device).manual_seed(int(seed) % (2**63))
        drawn = torch.randn(value.shape, generator=generators[device], dtype=work,
                            device=device).mul_(std).add_(mean)
        if float(x.min()) >= 0:
            drawn = drawn.abs_()
        out[name] = drawn.to(value.dtype)
    return out


def _two_valued(value: torch.Tensor) -> bool:
    """Exactly two distinct values (a mask or a table of flags; a constant is not one: it is
    the value the constructor happened to set)."""
    flat = value.detach().reshape(-1)
    other = flat[flat != flat[0]]
    if other.numel() == 0:
        return False
    return bool(((flat == flat[0]) | (flat == other[0])).all())


def perturbed_model_state(model, seed: int) -> dict:
    """A reference model's state re-drawn (``perturbed_state``) where it lives, returned on the
    host: its parameters always, its buffers unless mask-like."""
    state = {k: v.detach() for k, v in model.state_dict().items()}
    parameters = frozenset(name for name, _ in model.named_parameters())
    return {k: v.to("cpu", copy=True) for k, v in perturbed_state(state, seed, parameters).items()}


def match_state(mine: dict, state: dict) -> tuple[str, list] | None:
    """How the candidate's state tensors (``mine``, its ``state_dict()``) take the reference's
    ``state``: ``("by name", names)`` where every name of it is the candidate's with the same
    shape (a buffer the candidate added besides is kept), else ``("by order", [(target,
    name)...])`` where the tensors agree in shape in order (all of them; else the
    floating-point ones, counters such as ``num_batches_tracked`` set aside on either side),
    else None (its weights stay its own constructor's)."""
    if set(state) <= set(mine) and all(mine[k].shape == state[k].shape for k in state):
        return "by name", [(mine[k], k) for k in state]
    for keep in (lambda v: True, lambda v: v.is_floating_point()):
        ours = [v for v in mine.values() if keep(v)]
        theirs = [k for k, v in state.items() if keep(v)]
        if ours and len(ours) == len(theirs) and \
                all(a.shape == state[b].shape for a, b in zip(ours, theirs)):
            return "by order", list(zip(ours, theirs))
    return None


class StateSlots:
    """The candidate's own state tensors, matched once to the reference's state (by name, else
    by order where the shapes agree), so that a later state is copied into them in place: no
    code of the candidate's runs at a load (no ``load_state_dict`` override learns of it)."""

    def __init__(self, model, state: dict):
        self.pairs: list | None = None  # (the candidate's tensor, the state's name)
        if not state or not isinstance(model, torch.nn.Module):
            return
        matched = match_state(model.state_dict(), state)
        self.pairs = matched[1] if matched else None

    def load(self, state: dict) -> bool:
        """Copy ``state`` into the candidate's tensors; False where they could not be matched."""
        if self.pairs is None:
            return not state
        for target, name in self.pairs:
            _tensor_copy(target, state[name])
        return True
