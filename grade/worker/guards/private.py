"""The private copies of the worker package that the candidate's run calls (``_private_namespace``).

The worker's tasks run their candidate-side work (``tasks._candidate_task``,
``tasks._compile_task``) as functions of these copies, so that a submission, which can reach
every module through ``sys.modules``, rebinds and fills only the public modules.
"""
from __future__ import annotations

import contextlib
import sys
import types
from typing import Any

import torch
from kernelmill.grade.witness import Witness
from kernelmill.validate import measure as M
from kernelmill.validate import late_read as L
from kernelmill.validate import placement as P
from kernelmill.validate import stream_gate as S
from kernelmill.validate import timer as T
from kernelmill.validate import timing_graph as G

from .originals import _isinstance, _type

# The code of torch's lazy Dynamo-disable wrapper (``torch._disable_dynamo``), which
# ``TorchDispatchMode`` puts around each subclass's ``__torch_dispatch__``, and again around the
# wrapper when a copy of the class is made
_DYNAMO_WRAPPER = torch._disable_dynamo(lambda: None).__code__
PACKAGE = __name__.rpartition(".")[0].rpartition(".")[0]  # kernelmill.grade.worker


def _package_modules(package: str = PACKAGE) -> list:
    """A package and every module under it that is loaded (the worker package's ``__init__``
    imports ``reference_tasks`` and ``tasks``, which import the rest; the witness's imports
    its own)."""
    return [module for name, module in sorted(sys.modules.items())
            if name == package or name.startswith(package + ".")]


def _private_namespace() -> dict[str, dict]:
    """Private copies of every module of the worker package and of those it runs beside a
    submission (``validate.timer``: the timer, ``validate.timing_graph``: its graphs' capture,
    ``validate.placement``: where its inputs sit,
    ``validate.stream_gate``: the gate its unseen check's replays wait behind,
    ``validate.late_read``: the reading of its new inputs, and
    ``validate.measure``: the helpers and originals it calls; the ``grade.witness`` package: the profiler ranges and the reading of
    their records), each function and class defined there rebuilt
    over its copy (``contextmanager``s, static methods, properties and ``super()`` cells too),
    every list, dict and set copied, and each reference
    between them to the copy; returns each copy's namespace by module name. A submission reaches
    the modules (``sys.modules``) and may rebind their names, add members to their classes or
    fill their containers for as long as it likes: none of it is what the harness then calls
    (say a grad switch, ``_set_grad_enabled``, or the witness's ``_range_exit`` rebound for one
    call, to run PyTorch after the observed ranges closed, or properties given to the ``Timer``
    class that slow its clock for one read). Made before the candidate's import; frames,
    ``__globals__`` and the collector, which would reach the copies, are refused by the audit
    hook. One unit: a module of the package left out of the copy would be one whose names a
    submission could rebind under the harness."""
    modules = [*_package_modules(), G, L, M, P, S, T, *_package_modules(Witness.__module__)]
    copies = {m.__name__: types.ModuleType(m.__name__, m.__doc__) for m in modules}
    owners = {id(vars(m)): vars(copies[m.__name__]) for m in modules}
    helper = contextlib.contextmanager(_private_namespace).__code__  # contextlib's wrapper
    memo: dict[int, Any] = {}

    def ours(value) -> bool:
        return _type(value) is types.FunctionType and id(value.__globals__) in owners

    def function(original, closure=None):
        copy = types.FunctionType(original.__code__, owners[id(original.__globals__)],
                                  original.__name__, original.__defaults__,
                                  original.__closure__ if closure is None else closure)
        copy.__kwdefaults__ = dict(original.__kwdefaults__) if original.__kwdefaults__ \
            else None
        copy.__qualname__, copy.__doc__ = original.__qualname__, original.__doc__
        copy.__module__ = original.__module__
        return copy

    def own_defaults(copy) -> None:
        """A copy's default arguments, the copies' too: a class or function of the package
        bound as a default (the late read's unpickler class, ``late_read.read_part``) would
        otherwise be the public one, whose members a submission may replace."""
        if copy.__defaults__:
            copy.__defaults__ = tuple(convert(value) for value in copy.__defaults__)
        if copy.__kwdefaults__:
            copy.__kwdefaults__ = {name: convert(value)
                                   for name, value in copy.__kwdefaults__.items()}

    def defined_here(value) -> bool:
        module = sys.modules.get(getattr(value, "__module__", ""))
        return value.__module__ in copies and vars(module).get(value.__name__) is value

    def rebuilt_class(value):
        slots = vars(value).get("__slots__", ())
        slots = (slots,) if _type(slots) is str else tuple(slots)
        members = {key: member for key, member in vars(value).items()
                   if key not in ("__dict__", "__weakref__", *slots)}
        cls = _type(value)(value.__name__, tuple(convert(b) for b in value.__bases__), members)
        memo[id(value)] = cls
        for key, member in members.items():
            copy = convert(member)
            if ours(member) and "__class__" in member.__code__.co_freevars:
                cells = list(member.__closure__)
                cells[member.__code__.co_freevars.index("__class__")] = types.CellType(cls)
                copy = memo[id(member)] = function(member, tuple(cells))
                own_defaults(copy)
            if copy is not member:
                setattr(cls, key, copy)
        return cls

    def convert(value):
        if id(value) in memo:
            return memo[id(value)]
        kind, result = _type(value), value
        if kind is types.ModuleType and value.__name__ in copies:
            result = copies[value.__name__]
        elif ours(value):
            result = memo[id(value)] = function(value)  # (a default may lead back to it)
            own_defaults(result)
        elif kind is types.FunctionType and value.__code__ is helper and \
                ours(getattr(value, "__wrapped__", None)):
            result = contextlib.contextmanager(convert(value.__wrapped__))
        elif kind is types.FunctionType and value.__code__ is _DYNAMO_WRAPPER and \
                ours(getattr(value, "__wrapped__", None)):
            # the wrapped function's copy itself: the wrapper calls the original, which reads
            # the public module's globals (the op trace's dispatch turns Dynamo's frame hook
            # off itself, as the wrapper did)
            result = convert(value.__wrapped__)
        elif kind in (staticmethod, classmethod) and ours(value.__func__):
            result = kind(convert(value.__func__))
        elif kind is property and any(ours(f) for f in (value.fget, value.fset, value.fdel)):
            result = property(*(f if f is None else convert(f)
                                 for f in (value.fget, value.fset, value.fdel)), value.__doc__)
        elif _isinstance(value, type) and defined_here(value):
            return rebuilt_class(value)
        elif kind in (list, dict, set):
            result = kind(value)
        elif kind is types.MappingProxyType:  # a read-only table: its values the copies'
            result = types.MappingProxyType({key: convert(item) for key, item in value.items()})
        memo[id(value)] = result
        return result

    # Each copy's builtins first (one copy of the builtins' dict for all, taken now): a function
    # takes its builtins from its globals when it is made, and one made before its copy had them
    # would look them up in the live ``builtins`` module, which a submission can write to
    for module in modules:
        vars(copies[module.__name__])["__builtins__"] = convert(vars(module)["__builtins__"])
    for module in modules:
        space = vars(copies[module.__name__])
        for name, value in vars(module).items():
            space[name] = convert(value)
    return {name: vars(copy) for name, copy in copies.items()}
