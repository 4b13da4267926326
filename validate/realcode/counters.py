"""``advanced_counters``: an output that changes after many calls. A forward that counts its
calls (a step for an annealed temperature, calls since a random projection was redrawn) gives
one output in a validator's few calls and another in a grader's thousands. The counters a call
moves are advanced as if that many calls had run, and the output for the same input compared.
"""
from __future__ import annotations

from ..model_copy import copy_model
from .common import forward

# Advanced counters land one call short of a multiple of this (a multiple of 1,000 and of
# 1,024: ``calls % 1000 == 0`` fires on the next call), at least ``LEAST_CALLS`` calls on
CYCLE = 128_000
LEAST_CALLS = 1_000
# ... and again this many cycles further (about a million calls: a slow anneal)
FAR_CYCLES = 8


def _scalar(value):
    """A counter's number: an ``int`` or ``float`` (not a ``bool``), or a one-element tensor
    that is not boolean or complex; else None."""
    import torch

    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_complex() \
            and value.dtype != torch.bool and not value.is_meta:
        return value.item()
    return None


def _helpers(module) -> dict[str, object]:
    """Plain objects a module holds as attributes (a schedule, a step keeper): neither modules,
    tensors, containers nor classes, whose own attributes a forward may count in."""
    import torch

    found = {}
    for name, value in vars(module).items():
        if name.startswith("__") or isinstance(value, (torch.nn.Module, torch.Tensor, type)) \
                or not hasattr(value, "__dict__") or callable(value):
            continue
        found[name] = value
    return found


def _counters(model) -> dict[tuple[str, str], float]:
    """Every number a module holds as a plain attribute (an ``int`` or a ``float``, not a
    ``bool``), as a single-element tensor (a buffer or an attribute), or as an attribute of a
    plain object it holds (``_helpers``: ``"schedule.step"``), by (module path, name). Floats
    count too: fairseq keeps its update count in a float buffer."""
    import torch

    found = {}
    for path, module in model.named_modules():
        held = {**vars(module), **dict(module.named_buffers(recurse=False))}
        for name, value in held.items():
            number = _scalar(value)
            if number is not None:
                found[(path, name)] = number
        for name, helper in _helpers(module).items():
            for attr, value in vars(helper).items():
                number = _scalar(value)
                if number is not None:
                    found[(path, f"{name}.{attr}")] = number
    return found


def _set(model, where: tuple[str, str], value: float, step: float) -> None:
    import torch

    owner = model.get_submodule(where[0])
    *parts, name = where[1].split(".")
    for part in parts:
        owner = getattr(owner, part)
    held = getattr(owner, name)
    if isinstance(held, torch.Tensor):
        if held.is_floating_point():
            held.fill_(value)
            return
        # within its dtype, a few calls from wrapping (an int16 counter stops near 32767)
        info, room = torch.iinfo(held.dtype), 4 * abs(step)
        held.fill_(int(max(info.min + room, min(info.max - room, value))))
    else:
        setattr(owner, name, type(held)(value))


def _target(value: int, step: int, cycles: int, short: bool) -> int:
    """``value`` moved by at least ``LEAST_CALLS`` steps and then to a multiple of ``CYCLE``
    (``cycles`` more of them further), or one step short of it (``short``: a count tested
    after its increment fires on the next call; one tested before, on the multiple)."""
    reach = value + step * (LEAST_CALLS + 1)
    if step > 0:
        landing = -(-reach // CYCLE) * CYCLE + (cycles - 1) * CYCLE
    else:
        landing = (reach // CYCLE) * CYCLE - (cycles - 1) * CYCLE
    return landing - step if short else landing


def _advanced(value: float, step: float, cycles: int, short: bool) -> float:
    """An integer counter at ``_target``; a float one moved by its step as many calls on."""
    if isinstance(value, int) and isinstance(step, int):
        return _target(value, step, cycles, short)
    return value + step * _target(0, 1, cycles, short)


def advanced_counters(model, inputs: list, forward_seed: int, copies: bool) -> dict:
    """The counters one call moves (``_counters``), and the largest error
    (``checks.max_error``) between the output for ``inputs`` from a copy of the model and from
    copies of that copy, after its call, whose counters were advanced as if about 128 thousand
    calls had run (landing on a multiple of ``CYCLE`` and one short of it) and a million:
    ``{"counters": [...], "error": ...}`` (no counter moved: none, error 0)."""
    from .. import checks as C

    before = _counters(model)
    if not before:
        return {"counters": [], "error": 0.0}
    probe = copy_model(model)
    # which counters a call moves, and by how much; its output is the one compared with (one
    # call's own move is under the tolerance, or the fresh-model check has failed already)
    base = forward(probe, inputs, forward_seed, copies)
    after = _counters(probe)
    moved = {k: after[k] - before[k] for k in before if after.get(k, before[k]) != before[k]}
    if not moved:
        return {"counters": [], "error": 0.0}
    worst = 0.0
    for cycles, short in ((1, True), (1, False), (FAR_CYCLES, True)):
        advanced = copy_model(probe)
        for where, step in moved.items():
            _set(advanced, where, _advanced(after[where], step, cycles, short), step)
        try:
            out = forward(advanced, inputs, forward_seed, copies)
        except Exception:  # noqa: BLE001 — a forward that breaks after many calls moved too
            out = None
        worst = max(worst, float("inf") if out is None else C.max_error(out, base))
        del advanced, out
    return {"counters": [".".join(filter(None, k)) for k in moved], "error": worst}
