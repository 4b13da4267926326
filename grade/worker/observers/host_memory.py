"""Routes from tensor memory to Python values and back that bypass the dispatcher (so neither the
op trace nor the profiler sees them): per-element callbacks, conversions to Python or NumPy,
raw storage access, raw addresses, tensors over memory Python owns. Each is counted
(``host_access``, ``host_view``, ``host_alias``, ``foreign_memory``) in the sealed hook."""
from __future__ import annotations

import sys
import types

import torch

from ..guards.originals import _ORIGINALS, _isinstance, _raw, _Tensor, _tensor_storage, _type
from ..guards.patches import _still_warm
from .counts import _audit_event

# Python/NumPy containers, raw storage element access and serialization of raw bytes. A kernel
# needs none of them in forward; each use counts the elements it exposed.
_HOST_ACCESS = (
    ("Tensor", ("map_", "map2_", "apply_", "tolist", "numpy", "__array__", "__dlpack__")),
    ("UntypedStorage", ("__getitem__", "__setitem__", "tolist", "_write_file", "_set_from_file",
                        "_new_with_file", "from_buffer")),
    ("TypedStorage", ("__getitem__", "__setitem__", "tolist", "_write_file", "_set_from_file",
                      "_new_with_file", "from_buffer")),
    # the C entry points under ``__dlpack__``: a capsule of them is a writable NumPy view, in
    # which the answer can be computed (``_to_dlpack_versioned``)
    ("_C", ("_to_dlpack", "_to_dlpack_versioned")),
)


# Of those, the routes that leave a lasting view (a NumPy array, a DLPack capsule, a storage
# over a buffer) of tensor memory: made anywhere once the import began, Python computes through
# it later with no tensor method at all (NumPy views of its own staging tensors taken in
# ``__init__``, outside every call, to compute the answer in NumPy there)
# (a storage's file reads and writes hand a Python file object's ``readinto``/``write`` a
# memoryview over the storage itself, which the file object can keep)
_HOST_VIEWS = frozenset({"numpy", "__array__", "__dlpack__", "_to_dlpack", "_to_dlpack_versioned",
                         "from_buffer", "_write_file", "_set_from_file", "_new_with_file"})


def _count_host_access(original, per_call_elements: bool, view: bool = False):
    def access(self, *args, **kwargs):
        try:
            n = (self.numel() if _isinstance(self, torch.Tensor) else self.nbytes()) \
                if per_call_elements else 1
        except Exception:  # noqa: BLE001 — a class object (from_buffer) or odd receiver
            n = 1
        _audit_event("kernelmill.count", "host_access", max(1, int(n)))
        if view:
            _audit_event("kernelmill.count", "host_view", 1)
        return original(self, *args, **kwargs)
    return access


def _count_host_call(function, view: bool):
    """A static or class method's function, counted once per call (``from_buffer``)."""
    def call(*args, **kwargs):
        _audit_event("kernelmill.count", "host_access", 1)
        if view:
            _audit_event("kernelmill.count", "host_view", 1)
        return function(*args, **kwargs)
    return call


# A raw address of host memory handed to the submission's code (``data_ptr``): any C-level
# consumer of an address (NumPy's array interface, ctypes) makes it a writable view with no
# tensor method at all (NumPy views built from ``data_ptr()`` through ``__array_interface__``,
# in which the answer is computed). A Triton or CUDA kernel never needs the
# integer in Python (Triton's launcher asks for it itself, from trusted code); on a GPU it is a
# device address, not counted.
_HOST_ADDRESSES = (("Tensor", "data_ptr"), ("UntypedStorage", "data_ptr"),
                   ("TypedStorage", "data_ptr"))


def _count_host_address(original):
    def data_ptr(self, *args, **kwargs):
        try:
            host = not self.is_cuda  # (a fast attribute: Triton's launcher asks every launch)
        except Exception:  # noqa: BLE001 — an odd receiver: its address counts
            host = True
        if host:
            _audit_event("kernelmill.count", "host_view", 1)
        return original(self, *args, **kwargs)
    return data_ptr


# Tensors over Python-owned memory (a ``bytearray``, a file): what a kernel writes there Python
# reads and writes with no tensor method at all (a memoryview); made anywhere once the import
# began, they count (one made in ``__init__``, and the answer computed in Python between two
# copy kernels)
# (a storage's ``from_buffer`` is counted as host access in calls: ``_HOST_ACCESS``)
_HOST_ALIASING = ("frombuffer", "from_file", "from_numpy")


def _count_host_alias(original):
    def alias(*args, **kwargs):
        _audit_event("kernelmill.count", "host_alias", 1)
        return original(*args, **kwargs)
    return alias


def _hook_sites() -> list[tuple]:
    """Where the hooks go, as bound now: ``(owner, label, name, original, make_hook)``."""
    sites = []
    for name in _HOST_ALIASING:
        original = vars(torch).get(name)
        if original is not None:
            sites.append((torch, "torch", name, original, _count_host_alias))
    for owner_name, names in _HOST_ACCESS:
        owner = getattr(torch, owner_name, None)
        for name in names if owner is not None else ():
            original = _raw(owner, name)
            if original is None:
                continue
            if _isinstance(original, (classmethod, staticmethod)):
                # (a storage's ``from_buffer``)
                def make(original, view=name in _HOST_VIEWS):
                    return _type(original)(_count_host_call(original.__func__, view))
            else:
                def make(original, per_call=name not in ("__getitem__", "__setitem__"),
                         view=name in _HOST_VIEWS):
                    return _count_host_access(original, per_call, view)
            sites.append((owner, owner_name, name, original, make))
    for owner_name, name in _HOST_ADDRESSES:
        owner = getattr(torch, owner_name, None)
        original = None if owner is None else _raw(owner, name)
        if original is not None:
            sites.append((owner, owner_name, name, original, _count_host_address))
    return sites


def _install_host_access_hooks() -> None:
    hooks: dict[int, tuple] = {}
    for owner, label, name, original, make in _hook_sites():
        hooked = make(original)
        setattr(owner, name, hooked)
        _ORIGINALS[f"{label}.{name}"] = (owner, name, hooked)
        hooks[id(original)] = (original, hooked)
    _rebind_aliases(hooks)


# Each loaded module's names bound to a function the hooks replace, as the zygote found them
# (``zygote_warm``), with the module's namespace values then: a forked worker rebinds those and
# looks through the namespaces of only the modules changed since (or new). Looking through every
# namespace took 75 ms of each candidate's CPU on a 2-core host.
_WARM_ALIASES: dict[int, tuple] = {}  # id(module) -> (module, values, ((name, value), ...))
_WARM_TARGETS: list = []  # the functions those names were bound to


def zygote_warm() -> None:
    """Run by the zygote once its preloads are in, before it forks any worker."""
    _WARM_ALIASES.clear()
    targets = {id(site[3]): site[3] for site in _hook_sites()}
    _WARM_TARGETS[:] = targets.values()
    for module in list(sys.modules.values()):
        items = _namespace_items(module) if _isinstance(module, types.ModuleType) else None
        if items is not None:
            _WARM_ALIASES[id(module)] = (module, tuple(value for _name, value in items), tuple(
                (name, value) for name, value in items
                if targets.get(id(value), targets) is value))


def _namespace_items(module) -> tuple | None:
    try:
        return tuple(vars(module).items())
    except Exception:  # noqa: BLE001 — no namespace: nothing to reuse
        return None


def _rebind_aliases(hooks: dict) -> None:
    """Every module attribute bound to a hooked original (``torch.utils.dlpack.to_dlpack`` is
    ``torch._C._to_dlpack``) gets the hook too. The zygote's listing of a module serves while
    its namespace is as the zygote saw it and the originals hooked are the ones it looked for."""
    same = len(hooks) == len(_WARM_TARGETS) and all(
        (hooks.get(id(target)) or (None,))[0] is target for target in _WARM_TARGETS)
    warm = _WARM_ALIASES if same else {}
    for module_name, module in list(sys.modules.items()):
        if not _isinstance(module, types.ModuleType):
            continue
        listed = _still_warm(warm.get(id(module)), module)
        # Its values in place, a listed name still bound to its function: the names bound to
        # a hooked function are those listed (a name renamed with its value left in place
        # leaves a listed name bound to something else, and the whole namespace is looked at)
        if listed is None or any(vars(module).get(name, listed) is not value
                                 for name, value in listed):
            listed = list((getattr(module, "__dict__", None) or {}).items())
        for name, value in listed:
            found = hooks.get(id(value))
            if found is not None and found[0] is value:
                setattr(module, name, found[1])
                _ORIGINALS[f"{module_name}.{name}"] = (module, name, found[1])


_storage_resizable = torch.UntypedStorage.resizable
_storage_shared = torch.UntypedStorage.is_shared


def _foreign(value) -> bool:
    """A tensor over host memory torch's allocator did not hand out: NumPy's (``from_numpy``,
    ``asarray``), a Python buffer's, a file's or a shared mapping's (``from_file``, a storage
    over a memfd, ``share_memory_``). Python reaches such memory with no tensor method at all
    (and can compute the answer in NumPy there, between a copy in and a flag kernel), so
    whichever constructor made it, a kernel's argument, a copy's end or an output
    there is the host's work."""
    if _type(value) is not _Tensor:
        return False
    storage = _tensor_storage(value)
    # Host memory only: Python computes nowhere else (and every CUDA storage says it is shared;
    # an H100 run flagged every honest grade before this line)
    return storage.device.type == "cpu" and \
        (not _storage_resizable(storage) or _storage_shared(storage))


def _count_foreign(values: list) -> None:
    found = sum(1 for value in values if _foreign(value))
    if found:
        _audit_event("kernelmill.count", "foreign_memory", found)
