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


def _counters(model) -> dict[tuple[str, str], int]:
    """Every integer a module holds as a plain attribute (an ``int``, not a ``bool``) or as a
    single-element integer tensor (a buffer or an attribute), by (module path, name)."""
    import torch

    found = {}
    for path, module in model.named_modules():
        for name, value in vars(module).items():
            if isinstance(value, int) and not isinstance(value, bool):
                found[(path, name)] = value
        tensors = {**{k: v for k, v in vars(module).items() if isinstance(v, torch.Tensor)},
                   **dict(module.named_buffers(recurse=False))}
        for name, value in tensors.items():
            if value is not None and value.numel() == 1 and not value.is_floating_point() \
                    and not value.is_complex() and value.dtype != torch.bool:
                found[(path, name)] = int(value.item())
    return found


def _set(model, where: tuple[str, str], value: int, step: int) -> None:
    import torch

    module = model.get_submodule(where[0])
    held = getattr(module, where[1])
    if isinstance(held, torch.Tensor):
        # within its dtype, a few calls from wrapping (an int16 counter stops near 32767)
        info, room = torch.iinfo(held.dtype), 4 * abs(step)
        held.fill_(max(info.min + room, min(info.max - room, value)))
    else:
        setattr(module, where[1], value)


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


def advanced_counters(model, inputs: list, forward_seed: int, copies: bool) -> dict:
    """The integer counters one call moves (``_counters``), and the largest error
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
            _set(advanced, where, _target(after[where], step, cycles, short), step)
        try:
            out = forward(advanced, inputs, forward_seed, copies)
        except Exception:  # noqa: BLE001 — a forward that breaks after many calls moved too
            out = None
        worst = max(worst, float("inf") if out is None else C.max_error(out, base))
        del advanced, out
    return {"counters": [".".join(filter(None, k)) for k in moved], "error": worst}
