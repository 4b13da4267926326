"""``advanced_counters``: an output that changes after many calls. A forward that counts its
calls (a step for an annealed temperature, calls since a random projection was redrawn) gives
one output in a validator's few calls and another in a grader's thousands. The counters a call
moves are advanced as if that many calls had run, and the output for the same input compared.
"""
from __future__ import annotations

import functools
import numbers
import types

import numpy

from ..model_copy import copy_model
from .common import forward

# Advanced counters land one call short of a multiple of this (a multiple of 1,000 and of
# 1,024: ``calls % 1000 == 0`` fires on the next call), at least ``LEAST_CALLS`` calls on
CYCLE = 128_000
LEAST_CALLS = 1_000
# ... and again this many cycles further (about a million calls: a slow anneal)
FAR_CYCLES = 8


def _scalar(value):
    """A counter's number: a real number (``int``, ``float``, a NumPy scalar; not a
    ``bool``), or a one-element tensor that is not boolean or complex; else None."""
    import torch

    if isinstance(value, numbers.Real) and not isinstance(value, bool) and \
            type(value).__name__ != "bool_":
        return value
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_complex() \
            and value.dtype != torch.bool and not value.is_meta:
        return value.item()
    return None


def _holders(value) -> list[tuple[str, object]]:
    """(key, value) of what a plain holder holds: a dict's items, a list's or tuple's
    elements, a plain object's attributes (a schedule, a step keeper, a callable one too)."""
    import torch

    if isinstance(value, dict):
        return [(str(k), v) for k, v in value.items()]
    if isinstance(value, (list, tuple)):
        return [(str(i), v) for i, v in enumerate(value)]
    if isinstance(value, (torch.nn.Module, torch.Tensor, type, types.ModuleType,
                          types.FunctionType, types.MethodType, types.BuiltinFunctionType,
                          functools.partial)) or not hasattr(value, "__dict__"):
        return []
    return list(vars(value).items())


# A tensor of at most this many elements is read element by element (a step kept in one slot
# of a small state buffer: ``self.state[0] += 1``)
SMALL_TENSOR = 16


def _elements(value) -> list | None:
    """The numbers of a small tensor of more than one element (``SMALL_TENSOR``), not boolean
    or complex, flat; else None."""
    import torch

    if isinstance(value, torch.Tensor) and 1 < value.numel() <= SMALL_TENSOR and \
            not value.is_complex() and value.dtype != torch.bool and not value.is_meta:
        return value.detach().reshape(-1).tolist()
    return None


def _numbers(name: str, value, depth: int):
    """(key, number) of ``value`` if it is a counter's number (``_scalar``), or of each
    element of a small tensor (``"state[0]"``), else of what it holds (``_holders``),
    ``depth`` holders deep: ``"schedule.step"``, ``"state.t"``."""
    number = _scalar(value)
    elements = None if number is not None else _elements(value)
    if number is not None:
        yield name, number
    elif elements is not None:
        for i, element in enumerate(elements):
            yield f"{name}[{i}]", element
    elif depth:
        for key, inner in _holders(value):
            yield from _numbers(f"{name}.{key}", inner, depth - 1)


def _counters(model) -> dict[tuple[str, str], float]:
    """Every number a module holds: a plain attribute (an ``int`` or a ``float``, not a
    ``bool``), a single-element tensor (a buffer or an attribute), a class attribute of its
    own class, or a number inside a plain holder it keeps (a dict, a list, an object, two
    levels deep: ``"schedule.step"``, ``"state.t"``), by (module path, name). Floats count too:
    fairseq keeps its update count in a float buffer."""
    found = {}
    for path, module in model.named_modules():
        own = {k: v for k, v in vars(type(module)).items() if not k.startswith("__")}
        held = {**{f"{CLASS}{k}": v for k, v in own.items()}, **vars(module),
                **dict(module.named_buffers(recurse=False))}
        for name, value in held.items():
            if name not in MODULE_TABLES:
                found.update(((path, key), number) for key, number in
                             _numbers(name, value, 0 if name.startswith(CLASS) else 2))
    return found


CLASS = "class:"  # a counter held by the module's class (``type(self).calls += 1``)
# the module's own tables of parameters, buffers and children (read as such above)
MODULE_TABLES = frozenset({"_parameters", "_buffers", "_modules"})


def _set(model, where: tuple[str, str], value: float, step: float) -> None:
    import torch

    owner = model.get_submodule(where[0])
    if where[1].startswith(CLASS):
        owner, name = type(owner), where[1][len(CLASS):]
        parts = []
    else:
        *parts, name = where[1].split(".")
    for part in parts:
        owner = _item(owner, part)
    element = None
    if name.endswith("]"):  # one element of a small tensor (``_elements``)
        name, _, index = name[:-1].rpartition("[")
        element = int(index)
    held = _item(owner, name)
    if isinstance(held, torch.Tensor):
        if element is not None:  # in the order ``_elements`` reads, whatever the layout
            at = [int(i) for i in numpy.unravel_index(element, tuple(held.shape))]
            held = held[tuple(at)]
        with torch.no_grad():
            if held.is_floating_point():
                # where the dtype's steps stop adding (a half-precision count stops at 2048)
                reach = abs(step) * 2.0 / torch.finfo(held.dtype).eps
                held.fill_(max(-reach, min(reach, value)))
                return
            # within its dtype, a few calls from wrapping (an int16 counter stops near 32767)
            info, room = torch.iinfo(held.dtype), 4 * abs(step)
            held.fill_(int(max(info.min + room, min(info.max - room, value))))
        return
    number = int(value) if isinstance(held, numbers.Integral) else float(value)
    if isinstance(owner, (dict, list)):
        owner[_key(owner, name)] = number
    else:
        setattr(owner, name, number)


def _key(holder, name: str):
    return int(name) if isinstance(holder, (list, tuple)) else name


def _item(holder, name: str):
    """What ``holder`` (a dict, list or tuple, or an object) holds under ``name``."""
    if isinstance(holder, (dict, list, tuple)):
        return holder[_key(holder, name)]
    return getattr(holder, name)


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
    """A counter of whole numbers (an ``int``, a float holding one: fairseq's update count)
    at ``_target``; any other moved by its step as many calls on."""
    if float(value).is_integer() and float(step).is_integer() and step:
        return _target(int(value), int(step), cycles, short)
    return value + step * _target(0, 1, cycles, short)


def _moved(before: dict, after: dict) -> dict:
    """Each number that differs (NaN against NaN does not), by how much."""
    return {k: after[k] - before[k] for k in before
            if k in after and after[k] != before[k] and not (
                after[k] != after[k] and before[k] != before[k])}


def _same_step(a: float, b: float) -> bool:
    return a == b or abs(a - b) <= 1e-6 * max(abs(a), abs(b))


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
    moved = _moved(before, after)
    if not moved:
        return {"counters": [], "error": 0.0}
    # a counter moves again, by the same step, on the next call (a value computed once on the
    # first call, a scale from the input's shape, a loss kept for a trainer, moves only once
    # or by what the data says)
    forward(probe, inputs, forward_seed, copies)
    again = _counters(probe)
    moved = {k: step for k, step in _moved(after, again).items()
             if k in moved and _same_step(step, moved[k])}
    if not moved:
        return {"counters": [], "error": 0.0}
    after = again
    worst = 0.0
    for cycles, short in ((1, True), (1, False), (FAR_CYCLES, True)):
        advanced = copy_model(probe)
        for where, step in moved.items():
            try:
                _set(advanced, where, _advanced(after[where], step, cycles, short), step)
            except Exception:  # noqa: BLE001, S112 — a number that cannot be set drops only itself
                continue
        try:
            out = forward(advanced, inputs, forward_seed, copies)
        except Exception:  # noqa: BLE001 — a forward that breaks after many calls moved too
            out = None
        worst = max(worst, float("inf") if out is None else C.max_error(out, base))
        del advanced, out
    return {"counters": [".".join(filter(None, k)) for k in moved], "error": worst}
