"""Functions and classes rebound since the candidate's import (``snapshot_modules``,
``patched_functions``).

Setting an attribute on a module or a class raises no audit event, so a patch is seen by
comparing a snapshot taken before the import with what is bound afterwards: every loaded
module's callables, the members of the classes they define, and each module's type and names.
The zygote lists them once (``zygote_warm``); a forked worker reuses that listing while a
namespace is unchanged.
"""
from __future__ import annotations

import operator
import os
import sys
import types
from typing import Any

import torch

from .originals import _ORIGINALS, _isinstance, _raw, _type

# torch._dynamo, when something imports it, rewraps these with functools.wraps (benign).
_DYNAMO_REWRAPPED = {"torch.manual_seed"}


def _unwrapped_is(current, original, _getattr=getattr) -> bool:
    for _ in range(3):
        current = _getattr(current, "__wrapped__", None)
        if current is original:
            return True
    return False


# Every function and class bound on a module loaded before the candidate's import (the
# standard library's, torch's, triton's, builtins, kernelmill's own) and the methods and
# descriptors of every class those modules define (torch.no_grad's ``__exit__``, a dispatch
# mode's ``__enter__``), as they were then (``snapshot_modules``): one rebound since is a
# patch, whoever looks it up (the worker binds what it calls at import; torch's own code,
# ``torch.save`` and the witness look many up). Setting an attribute on a module or a class
# raises no audit event, so this is how such a patch is seen (about 3,800 classes and 58,000
# entries with torch and triton loaded: 160 ms to take, 15 ms to check on a 2-core host).
# A submission can reach kernelmill's modules through the standard library's private aliases
# and rewrite the worker's result encoder, or wrap ``json.dumps`` and
# ``torch.serialization._save`` to rewrite the timing reports and the facts. The caller keeps
# the snapshot (a tuple in its own frame), and no module holds a copy (building one cost 0.26
# CPU-s of an honest CPU grade's 2.0, and nothing read it).
_CLASSES_WATCHED = (torch.Tensor, torch.nn.Module)


def _callables(owner) -> list[tuple[Any, str, Any]]:
    """What ``owner`` binds that code calls through it: functions and classes, and modules (a
    module rebound to a proxy, say ``torch._C`` whose ``_set_grad_enabled`` runs the answer after
    the observed ranges closed, is every function under it rebound)."""
    try:
        namespace = owner.__dict__
    except Exception:  # noqa: BLE001 — a module object without a namespace has nothing to watch
        return []
    return [(owner, name, value) for name, value in list(namespace.items())
            if callable(value) or issubclass(_type(value), types.ModuleType)]


def _class_members(cls) -> list[tuple[Any, str, Any]]:
    return [(cls, attr, member) for attr, member in list(vars(cls).items())
            if callable(member) or _isinstance(member, (staticmethod, classmethod, property))]


def _owners() -> list[tuple[Any, Any, tuple | None]]:
    """What the snapshot watches, with the function that lists its entries and the zygote's
    listing of them where still good (``_still_warm``; None: list anew): every loaded module,
    the classes each defines, and ``_CLASSES_WATCHED``. A module's namespace is looked at once
    for both of its listings (the zygote made them from the same namespace)."""
    # Triton's interpreter (CPU) rebinds triton.language's builtins for each launch, and leaves
    # some rebound: those modules are the interpreter's to change there.
    interpreted = os.environ.get("TRITON_INTERPRET") == "1"
    owners = []
    for module_name, module in list(sys.modules.items()):
        if not _isinstance(module, types.ModuleType) or \
                (interpreted and module_name.startswith("triton.language")):
            continue
        classes = _warm_classes(module, module_name)
        if classes is None:
            owners.append((module, _callables, None))
            classes = _module_classes(module, module_name)
        else:  # its namespace as the zygote saw it: so are its entries
            warm = _WARM.get(id(module))
            owners.append((module, _callables,
                           warm[2] if warm is not None and warm[0] is module else None))
        owners.extend((cls, _class_members, _warm_entries(cls)) for cls in classes)
    owners.extend((cls, _class_members, _warm_entries(cls)) for cls in _CLASSES_WATCHED)
    return owners


def _module_classes(module, module_name: str) -> list:
    """The classes ``module`` defines (bound in it, their ``__module__`` its name)."""
    return [value for value in list(vars(module).values())
            if issubclass(_type(value), type) and vars(value).get("__module__") == module_name]


def _warm_classes(module, module_name: str) -> tuple | None:
    """The zygote's list of the classes ``module`` defines if its namespace is as the zygote saw
    it, else None. Finding them anew walked every value of every loaded module: 0.45 CPU-s of
    each candidate on an H200 host."""
    return _still_warm(_WARM_CLASSES.get((id(module), module_name)), module)


# Each owner's entries as the zygote found them (``zygote_warm``), with its namespace's values
# then: a forked worker reuses them while the namespace holds the same values (by identity, in
# order) and lists the rest anew (what its own hooks rebound, what it imported since). Listing
# every owner took 0.3-0.4 CPU-s of each candidate on a 2-core host, about 1 s on an H100 host.
# (A name renamed with its value left in place keeps the values: the listed name is then
# missing, which the check reads as a patch.)
_WARM: dict[int, tuple] = {}
_WARM_CLASSES: dict[tuple[int, str], tuple] = {}  # and each module's classes, by (id, name)


def zygote_warm() -> None:
    """Run by the zygote once its preloads are in, before it forks any worker."""
    _WARM.clear()
    _WARM_CLASSES.clear()
    first: dict[int, tuple] = {}  # each module's values as its classes were listed
    for module_name, module in list(sys.modules.items()):
        values = _namespace_values(module) if _isinstance(module, types.ModuleType) else None
        if values is not None:
            first[id(module)] = values
            _WARM_CLASSES[(id(module), module_name)] = (
                module, values, tuple(_module_classes(module, module_name)))
    for owner, lister, _listed in _owners():
        values = _namespace_values(owner)
        if values is None or (id(owner) in first and not _same_values(values, first[id(owner)])):
            continue  # (a module changed between its two listings: a worker lists it anew)
        _WARM[id(owner)] = (owner, values, tuple(lister(owner)))


def _namespace_values(owner) -> tuple | None:
    try:
        return tuple(owner.__dict__.values())
    except Exception:  # noqa: BLE001 — no namespace: nothing to reuse
        return None


def _same_values(now: tuple | None, then: tuple, _is=operator.is_) -> bool:
    """Whether two namespaces' values are the same, each by identity, in order."""
    return now is not None and len(now) == len(then) and all(map(_is, now, then))


def _warm_entries(owner) -> tuple | None:
    """The zygote's entries of ``owner`` if its namespace is as the zygote saw it, else None."""
    return _still_warm(_WARM.get(id(owner)), owner)


def _still_warm(warm: tuple | None, owner) -> tuple | None:
    """A zygote-time listing ``(owner, values, listed)``'s ``listed`` while ``owner``'s
    namespace holds the same values (by identity, in order), else None."""
    if warm is None or warm[0] is not owner:
        return None
    return warm[2] if _same_values(_namespace_values(owner), warm[1]) else None


def _module_entries(own: list | None = None) -> list[tuple[Any, str, Any]]:
    """Every watched entry; with ``own``, those whose owner is kernelmill's or builtins
    (``_owned_by_us``) are put there too, the owner asked once, not once per entry."""
    entries = []
    for owner, lister, warm in _owners():
        listed = warm if warm is not None else lister(owner)
        entries.extend(listed)
        if own is not None and listed and _owned_by_us(owner):
            own.extend(listed)
    return entries


def _owned_by_us(owner) -> bool:
    """A kernelmill module or class, or builtins."""
    name = owner.__name__ if issubclass(_type(owner), types.ModuleType) else \
        vars(owner).get("__module__", "")
    return name == "builtins" or str(name).startswith("kernelmill.")


def _module_shapes() -> tuple:
    """Each loaded module with its type and the names it binds: how a module is reached beside
    its callables (a module ``__getattr__`` added, a non-callable entry deleted so that the
    lookup falls through to it; a key that is not a ``str``, whose ``__eq__`` runs at every
    lookup of the name it equals; a module's ``__class__`` swapped for one with a
    ``__getattribute__``)."""
    interpreted = os.environ.get("TRITON_INTERPRET") == "1"
    return tuple((module, _type(module), module_name, frozenset(vars(module)))
                 for module_name, module in list(sys.modules.items())
                 if _isinstance(module, types.ModuleType) and
                 not (interpreted and module_name.startswith("triton.language")))


_MODULE_HOOKS = ("__getattr__", "__dir__")  # names a module calls when a lookup misses


def snapshot_modules(*, with_own: bool = False) -> tuple:
    """The bindings watched now: ``(entries, originals, module shapes)``, what
    ``patched_functions`` compares against. ``with_own``: ``(snapshot, own)``, where ``own`` is
    the part of kernelmill's modules and classes and builtins alone (checked at every timing
    report), made in the same pass."""
    import triton
    import triton.language  # noqa: F401 — loaded now, so they are watched
    from torch.utils import cpp_extension  # noqa: F401 — loaded now, so it is watched

    own: list | None = [] if with_own else None
    entries = _module_entries(own)
    originals = tuple((label, *entry) for label, entry in _ORIGINALS.items())
    shapes = _module_shapes()
    snapshot = (tuple(entries), originals, shapes)
    if not with_own:
        return snapshot
    return snapshot, (tuple(own), (), tuple(m for m in shapes if _owned_by_us(m[0])))


def _reshaped_modules(shapes: tuple, *, _vars=vars, _type=type, _str=str, _list=list,
                      _frozenset=frozenset, _sorted=sorted) -> list[str]:
    """The modules of ``shapes`` whose type changed, that gained a lookup hook, lost a name, or
    hold a key that is not exactly a ``str`` (checked first, by type alone: hashing or comparing
    such a key runs its code)."""
    found = []
    for module, kind, label, names in shapes:
        if _type(module) is not kind:
            found.append(f"{label}.__class__")
            continue
        namespace = _vars(module)
        keys = _list(namespace)
        if any(_type(key) is not _str for key in keys):
            found.append(f"{label}: a name that is not a str")
            continue
        now = _frozenset(keys)
        found.extend(f"{label}.{hook}" for hook in _MODULE_HOOKS
                     if hook in now and hook not in names)
        found.extend(f"{label}.{name} (deleted)" for name in _sorted(names - now)[:4])
    return found


def patched_functions(snapshot: tuple, *, _vars=vars, _id=id, _set=set,
                      _sorted=sorted, _getattr=getattr) -> list[str]:
    """The snapshot's entries (``snapshot_modules``) rebound since, by name. The builtins it
    uses are bound as its keyword defaults (setting a function's defaults is an audited event,
    refused to a submission): a submission's ``vars`` that returned the originals would hide
    every patch, its own included."""
    entries, originals, *shapes = snapshot
    patched = _reshaped_modules(shapes[0]) if shapes else []
    guarded = _set([(_id(owner), name) for _label, owner, name, _original in originals])
    for owner, name, original in entries:
        current = _vars(owner).get(name)
        if current is not original and (_id(owner), name) not in guarded and not \
                (name in ("manual_seed", "seed") and _unwrapped_is(current, original)):
            patched.append(f"{_getattr(owner, '__name__', owner)}.{name}")
    for label, owner, name, original in originals:
        current = _raw(owner, name)
        if current is original:
            continue
        if label in _DYNAMO_REWRAPPED and "torch._dynamo" in sys.modules and \
                _unwrapped_is(current, original):
            continue
        patched.append(label)
    return _sorted(_set(patched))
