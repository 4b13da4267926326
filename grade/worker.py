"""Worker side of grading: the reference run and the candidate run, in separate processes.

``reference_task`` builds the problem from its source text (held in memory, never read from a
file), draws every trial's inputs from the seeds the parent chose, and returns those inputs, the
reference outputs and the reference's timings. It never sees candidate code.

``candidate_task`` builds ``ModelNew`` with the reference's constructor arguments and weights,
calls it on the parent's inputs (fresh buffers, a buffer refilled in place, a repeat) and
returns raw facts: outputs as CPU copies, inputs as they were after each call, the PyTorch ops
each call dispatched, custom-kernel launches, threads and processes left behind, functions
patched, timings. It judges nothing: the trusted parent compares and decides (``grade.judge``).

Timing goes through ``validate.measure`` (shared with the validator): the parent drives both
workers' timers through one exclusive window (``validate.window``), and a captured CUDA graph's
output is replayed on other inputs for the parent to check (``graph_check``).

Before any candidate code is imported this module binds the functions it relies on (timers,
synchronisation, copies) and installs counting hooks on Triton's launch path and on
``torch.utils.cpp_extension`` loaders; after the candidate ran it reports every guarded name
whose object changed.

Imports only torch, triton (if present), the standard library, the harness worker module and
``validate.measure``.
"""
from __future__ import annotations

import ast
import builtins
import contextlib
import inspect
import itertools
import operator
import os
import random
import statistics
import sys
import threading
import time
import types
import weakref
from typing import Any

import torch
from kernelmill.validate import measure as M
from kernelmill.validate import sandbox
from kernelmill.validate.harness_worker import (
    RESULT_GUARD,
    late_payload,
    mark_stage,
    receive,
    report,
    require_trusted_senders,
)
from kernelmill.validate.measure import flatten_outputs, load_namespace
from kernelmill.validate.measure import synchronize as sync
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry as _torch_flop_registry

from .witness import Witness, dispatch_state, op_qualname

# ---------------------------------------------------------------- originals, bound at import

_perf_counter = time.perf_counter
_enumerate_threads = threading.enumerate
_getrefcount = sys.getrefcount
_Tensor = torch.Tensor
_tensor_to = torch.Tensor.to
_tensor_detach = torch.Tensor.detach
_tensor_copy = torch.Tensor.copy_
_tensor_storage = torch.Tensor.untyped_storage
_generator_seed = torch._C.Generator.manual_seed
_cpu_generator = torch.default_generator
_Generator = torch._C.Generator
_cuda_seed_all = torch.cuda.manual_seed_all
_set_versions = getattr(torch._C._autograd, "_unsafe_set_version_counter", lambda *_: None)
_is_capturing = torch.cuda.is_current_stream_capturing
_empty = torch.empty
_zero = torch.Tensor.zero_
_no_grad = torch.no_grad  # looked up by every call: a submission replaced it (object.__setattr__)
_is_grad_enabled = torch._C.is_grad_enabled
_set_grad_enabled = torch._C._set_grad_enabled
_full = torch.full
_tensor_set = torch.Tensor.set_
_tensor_fill = torch.Tensor.fill_
_median = statistics.median
_listdir = os.listdir
_type = type
_callable = callable
_isinstance = isinstance
_getattr_static = inspect.getattr_static
_weak_ref = weakref.ref

_GUARDED = (  # (owner, attribute): timing, synchronisation, comparison and copy functions
    (time, "perf_counter"), (time, "perf_counter_ns"), (time, "monotonic"), (time, "time"),
    (time, "process_time"), (threading, "enumerate"), (os, "listdir"), (os, "getpid"),
    (torch, "allclose"), (torch, "equal"), (torch, "isclose"), (torch, "manual_seed"),
    (torch, "empty"), (torch, "save"), (torch.testing, "assert_close"),
    (torch.cuda, "synchronize"), (torch.cuda, "Event"), (torch.cuda, "current_stream"),
    (torch.cuda.Event, "elapsed_time"), (torch.cuda.Event, "record"),
    (torch.cuda.Event, "synchronize"), (torch.Tensor, "to"), (torch.Tensor, "cpu"),
    (torch.Tensor, "clone"), (torch.Tensor, "copy_"), (torch.Tensor, "detach"),
    (torch.Tensor, "data_ptr"), (torch.Tensor, "untyped_storage"), (torch.Tensor, "__eq__"),
    (torch.Tensor, "__torch_function__"), (torch.Tensor, "__reduce_ex__"),
    (torch.nn.Module, "__call__"), (torch.nn.Module, "_call_impl"), (torch.Tensor, "zero_"),
    (statistics, "median"), *M.GUARDED,
    *((builtins, name) for name in ("min", "max", "len", "sorted", "float", "int", "isinstance",
                                    "type", "zip", "any", "all", "range", "sum", "open",
                                    "getattr", "setattr", "print", "bool", "str")),
)


_CUDA_GENERATORS: list = []  # CUDA's generators, bound before the candidate's import


def _bind_cuda_generators() -> None:
    """Keep CUDA's generators (``torch.cuda.default_generators``, filled when CUDA starts) for
    ``_manual_seed``: called before the candidate's import, after CUDA started."""
    generators = torch.cuda.default_generators
    _CUDA_GENERATORS[:] = [g for g in generators if _type(g) is _Generator] \
        if _type(generators) is tuple else []


def forward_seed(init_seed: int) -> int:
    """The RNG seed every forward of a grade starts from, the reference's and the candidate's
    alike: the grade's own (secret, fresh per submission), never a trial's. A seed per trial
    told the candidate which inputs a call had (a key for an answer cache, red-team round 28)."""
    return int(init_seed) + 1


def _manual_seed(seed: int) -> None:
    """``torch.manual_seed`` for the CPU and CUDA generators alone, by the generators' own
    method: torch's also seeds every other backend, a privateuse1 backend's module among them,
    which a submission can add (red-team round 5 computed PyTorch's answer in such a module's
    ``manual_seed_all``, called before each observed call's range opened). No Python of torch's
    runs: ``torch.cuda.is_initialized`` reads a module global a submission can rebind."""
    seed = int(seed)
    _generator_seed(_cpu_generator, seed)
    if _CUDA_GENERATORS or _observed()["armed"]:
        # once a candidate's code may run, only the generators bound before its import: an
        # attribute of ``torch.cuda`` read here, before the call's range opens, ran a module
        # ``__getattr__`` of the submission's making that computed the answer with PyTorch
        # (red-team round 13)
        for generator in _CUDA_GENERATORS:
            _generator_seed(generator, seed)
        return
    generators = torch.cuda.default_generators  # filled when CUDA starts (a C call)
    if _type(generators) is not tuple:
        return  # rebound: CUDA's generators are not seeded, for no one's benefit
    if not generators:
        # before CUDA starts, queued as torch queues it; never once a candidate's code may run
        # (torch's queue takes a lock looked up on torch.cuda, which a submission rebound to
        # run PyTorch before each observed call; red-team round 6)
        if not _observed()["armed"]:
            _cuda_seed_all(seed)
        return
    for generator in generators:
        if _type(generator) is _Generator:
            _generator_seed(generator, seed)


def _raw(owner, name, _getattr=getattr):
    """The attribute as stored (a class's own dict entry, not a fresh bound method)."""
    if _isinstance(owner, type):
        for klass in owner.__mro__:
            if name in klass.__dict__:
                return klass.__dict__[name]
        return None
    return _getattr(owner, name, None)


_ORIGINALS = {f"{getattr(owner, '__name__', owner)}.{name}": (owner, name, _raw(owner, name))
              for owner, name in _GUARDED}

# What the observers count lives in the sealed audit hook (``refuse_runtime_code``), out of every
# module's reach: the hooks below report what they see as audit events (``kernelmill.*``) and the
# harness reads copies (``_observed``). Red-team answers cleared module-level flags in place
# (``_active[0] = False`` before computing on the host, ``_in_hook[0] = True`` to switch the
# audit hook off): a flag a hook reads is a flag a submission that reaches the hook can write.
_audit_event = sys.audit
_COUNTED = ("launches", "ext_calls", "thread_starts", "dispatch_state", "host_access", "ghosted",
            "host_alias", "host_view", "foreign_memory", "threads_started")


def _observed() -> dict:
    """A copy of the sealed hook's counts (``_COUNTED``), its refusals and whether it is armed;
    zeros before it is installed."""
    box: list = []
    _audit_event("kernelmill.read", box)
    return box[0] if box else {**dict.fromkeys(_COUNTED, 0), "refused": [], "armed": False}


def _check_dispatch_state() -> None:
    """At every point we get control inside a call (a launch, an extension call, the end of
    forward) the thread's dispatch-key sets must be what they were when the call began: a
    guard that excludes the Python key (or any other) is how work is hidden from a trace."""
    _audit_event("kernelmill.state", dispatch_state())


def _count_thread_start(original):
    def start(*args, **kwargs):
        _audit_event("kernelmill.count", "thread_starts", 1)
        return original(*args, **kwargs)
    return start


def _install_thread_hooks() -> None:
    """Count threads started during forward: work done in a joined thread escapes tracing."""
    import _thread

    for owner in (_thread, threading):
        for name in ("start_new_thread", "_start_new_thread", "start_joinable_thread",
                     "_start_joinable_thread"):
            original = owner.__dict__.get(name)
            if original is not None:
                hooked = _count_thread_start(original)
                setattr(owner, name, hooked)
                _ORIGINALS[f"{owner.__name__}.{name}"] = (owner, name, hooked)


# Python-level routes from tensor memory to Python values and back that bypass the dispatcher
# (so neither the op trace nor the profiler sees them): per-element callbacks, conversions to
# Python/NumPy containers, raw storage element access and serialization of raw bytes. A kernel
# needs none of them in forward; each use counts the elements it exposed.
_HOST_ACCESS = (
    ("Tensor", ("map_", "map2_", "apply_", "tolist", "numpy", "__array__", "__dlpack__")),
    ("UntypedStorage", ("__getitem__", "__setitem__", "tolist", "_write_file", "_set_from_file",
                        "_new_with_file", "from_buffer")),
    ("TypedStorage", ("__getitem__", "__setitem__", "tolist", "_write_file", "_set_from_file",
                      "_new_with_file", "from_buffer")),
    # the C entry points under ``__dlpack__``: a capsule of them is a writable NumPy view
    # (red-team round 7 computed the answer in NumPy through ``_to_dlpack_versioned``)
    ("_C", ("_to_dlpack", "_to_dlpack_versioned")),
)


# Of those, the routes that leave a lasting view (a NumPy array, a DLPack capsule, a storage
# over a buffer) of tensor memory: made anywhere once the import began, Python computes through
# it later with no tensor method at all (red-team round 14 took NumPy views of its own staging
# tensors in ``__init__``, outside every call, and computed the answer in NumPy there)
# (a storage's file reads and writes hand a Python file object's ``readinto``/``write`` a
# memoryview over the storage itself: red-team round 16 kept it)
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
# tensor method at all (red-team round 18 computed the answer in NumPy over views built from
# ``data_ptr()`` through ``__array_interface__``). A Triton or CUDA kernel never needs the
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
# began, they count (red-team round 8 made one in ``__init__`` and computed the answer in Python
# between two copy kernels)
# (a storage's ``from_buffer`` is counted as host access in calls: ``_HOST_ACCESS``)
_HOST_ALIASING = ("frombuffer", "from_file", "from_numpy")


def _count_host_alias(original):
    def alias(*args, **kwargs):
        _audit_event("kernelmill.count", "host_alias", 1)
        return original(*args, **kwargs)
    return alias


def _install_host_access_hooks() -> None:
    hooks: dict[int, tuple] = {}

    def install(owner, label: str, name: str, original, hooked) -> None:
        setattr(owner, name, hooked)
        _ORIGINALS[f"{label}.{name}"] = (owner, name, hooked)
        hooks[id(original)] = (original, hooked)

    for name in _HOST_ALIASING:
        original = vars(torch).get(name)
        if original is not None:
            install(torch, "torch", name, original, _count_host_alias(original))
    for owner_name, names in _HOST_ACCESS:
        owner = getattr(torch, owner_name, None)
        for name in names if owner is not None else ():
            original = _raw(owner, name)
            if original is None:
                continue
            if _isinstance(original, (classmethod, staticmethod)):
                # (a storage's ``from_buffer``: skipped until red-team round 15 saw it)
                hooked = _type(original)(_count_host_call(original.__func__, name in _HOST_VIEWS))
            else:
                hooked = _count_host_access(original, name not in ("__getitem__", "__setitem__"),
                                            name in _HOST_VIEWS)
            install(owner, owner_name, name, original, hooked)
    for owner_name, name in _HOST_ADDRESSES:
        owner = getattr(torch, owner_name, None)
        original = None if owner is None else _raw(owner, name)
        if original is not None:
            install(owner, owner_name, name, original, _count_host_address(original))
    _rebind_aliases(hooks)


def _rebind_aliases(hooks: dict) -> None:
    """Every module attribute bound to a hooked original (``torch.utils.dlpack.to_dlpack`` is
    ``torch._C._to_dlpack``) gets the hook too."""
    for module_name, module in list(sys.modules.items()):
        namespace = getattr(module, "__dict__", None) if \
            _isinstance(module, types.ModuleType) else None
        for name, value in list((namespace or {}).items()):
            found = hooks.get(id(value))
            if found is not None and found[0] is value:
                setattr(module, name, found[1])
                _ORIGINALS[f"{module_name}.{name}"] = (module, name, found[1])


def _kernel_name(jit_function) -> str:
    """The name Triton compiles a JIT function's kernel under: the JIT function's own
    ``__name__`` (``ASTSource.name``), read without running any candidate code; "" when it is
    not a plain string."""
    name = _getattr_static(jit_function, "__name__", None)
    return name if _type(name) is str else ""


class _GridSeen:
    """A launch's callable grid, called as Triton calls it (once, with its arguments); keeps
    the grid it returned in ``shape``."""
    __slots__ = ("grid", "shape")

    def __init__(self, grid, shape: list):
        self.grid, self.shape = grid, shape

    def __call__(self, meta):
        found = self.grid(meta)
        self.shape.append(found)
        return found


def _exact_int_types() -> frozenset:
    """The types a grid extent may have and be read: Python's and NumPy's own integers (exact
    types, no subclass)."""
    import numpy

    found = {int, bool}
    for name in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                 "intc", "uintc", "int_", "uint", "longlong", "ulonglong"):
        kind = getattr(numpy, name, None)
        if _type(kind) is type:
            found.add(kind)
    return frozenset(found)


_GRID_INTS = _exact_int_types()


def _any_program(shape: list) -> bool:
    """Whether a launch's grid (``shape``: what it was, once known) has a program: False only
    for a grid of integers with a zero (or negative) extent."""
    if not shape:
        return True
    grid = shape[-1]
    grid = grid if _type(grid) in (tuple, list) else (grid,)
    extents = [int(g) if _type(g) in _GRID_INTS else None for g in grid[:3]]
    # an extent that is no integer (a tensor worth 0 launched nothing in red-team round 26)
    # is not read: such a launch does not count; nor is one of a subclass of int, whose own
    # comparisons or conversions could answer differently from what Triton's launcher reads
    return bool(extents) and all(g is not None and g > 0 for g in extents)


def _install_triton_hook() -> bool:
    """Count launches (not warm-ups) of Triton kernels, compiled or interpreted."""
    try:
        from triton.runtime import jit
    except Exception:  # noqa: BLE001 — no Triton: extensions are the only custom kernels
        return False
    classes = [jit.JITFunction]
    try:
        from triton.runtime.interpreter import InterpretedFunction

        classes.append(InterpretedFunction)
    except Exception:  # noqa: BLE001
        pass
    for cls in classes:
        original = cls.run

        def run(self, *args, grid, warmup, _original=original, **kwargs):
            seen: list = []
            shape: list = []  # the grid Triton launched (a callable grid's result, once)
            if _callable(grid):
                grid = _GridSeen(grid, shape)
            else:
                shape.append(grid)
            if not warmup:
                _count_foreign([*args, *kwargs.values()])
                _audit_event("kernelmill.launch", "launches", _spans([*args, *kwargs.values()]),
                             dispatch_state(), seen)
                if "skip" in seen:  # the ghost call: skipped, counted as ghosted
                    return None
            _audit_event("kernelmill.in_launch", 1)
            try:
                with Witness.launch(_kernel_name(self)):
                    launched = _original(self, *args, grid=grid, warmup=warmup, **kwargs)
            finally:
                _audit_event("kernelmill.in_launch", -1)
            # counted once it ran: a launch that a pre-run hook of the submission's made raise
            # before any program ran counted, and its forward caught the error (red-team
            # round 9: "1 launch" a call, no Triton program ever run)
            # and only if it ran a program: an empty grid launches nothing (red-team round 25
            # kept its one launch a call that way while serving a cached answer)
            if "active" in seen and _any_program(shape):
                _audit_event("kernelmill.launched", 1)
            return launched

        cls.run = run
        _ORIGINALS[f"{cls.__name__}.run"] = (cls, "run", run)
    return True


# The launch wrapper's code (the only code that may open a launch in the sealed hook)
_LAUNCH_CODES = frozenset(const for const in _install_triton_hook.__code__.co_consts
                          if _isinstance(const, types.CodeType) and const.co_name == "run")


class _ExtensionProxy:
    """Stands in for a module built by ``load_inline``/``load``; counts calls during forward."""

    def __init__(self, module):
        object.__setattr__(self, "_module", module)

    def __getattr__(self, name):
        value = getattr(object.__getattribute__(self, "_module"), name)
        if callable(value) and not _isinstance(value, type):
            def call(*args, **kwargs):
                active: list = []
                _count_foreign([*args, *kwargs.values()])
                _audit_event("kernelmill.launch", "ext_calls", _spans([*args, *kwargs.values()]),
                             dispatch_state(), active)
                if active:
                    with Witness.extension():
                        return value(*args, **kwargs)
                return value(*args, **kwargs)
            return call
        return value


def _prebuilt_file(cpp_extension, args: tuple, kwargs: dict) -> str | None:
    """The module file the compile worker already built for this source (loaded without
    running ninja or a compiler: this worker may not create processes); None when there is
    none."""
    name = kwargs.get("name", args[0] if args else None)
    if not isinstance(name, str) or kwargs.get("is_standalone"):
        return None
    try:
        file = os.path.join(cpp_extension._get_build_directory(name, False), f"{name}.so")
    except Exception:  # noqa: BLE001 — fall back to torch's own loader
        return None
    return file if os.path.exists(file) else None


def _file_digest(path: str) -> str:
    import hashlib

    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _native_texts(name: str, args: tuple, kwargs: dict) -> list[str]:
    """The native source text a ``load_inline`` / ``load`` call compiles, and its compiler and
    linker flags (``-Wl,--wrap=...`` renames a symbol the source calls)."""
    flags = [" ".join(v for v in ([value] if isinstance(value, str) else list(value or []))
                      if isinstance(v, str))
             for key, value in kwargs.items() if key.startswith("extra_")]
    if name == "load_inline":
        texts = []
        for index, key in ((1, "cpp_sources"), (2, "cuda_sources")):
            value = kwargs.get(key, args[index] if len(args) > index else None)
            texts += [value] if isinstance(value, str) else list(value or [])
        return [t for t in texts if isinstance(t, str)] + [f for f in flags if f]
    sources = kwargs.get("sources", args[1] if len(args) > 1 else [])
    out = [f for f in flags if f]
    for path in [sources] if isinstance(sources, str) else list(sources or []):
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                out.append(handle.read())
        except OSError:
            pass
    return out


# What the compile worker saw built: every native text handed to the loaders and the digest of
# every module file they produced. The parent scans the texts; the candidate worker loads only a
# module file whose digest is among those (``extension_digests``): code built from text nobody
# scanned, or swapped into the folder later, does not load.
_BUILT: dict[str, list] = {"texts": [], "digests": []}


# A native text reaches the parent in parts of at most this many characters (small frames)
STREAMED_PART_CHARS = 256 << 10


def _stream_texts(texts: list[str], send) -> None:
    """Send each text to the parent now, in parts: ``{"native_text": i, "part": str}`` (joined
    again by ``grader.streamed_texts``)."""
    for text in texts:
        index = next(_stream_index)
        for start in range(0, max(1, len(text)), STREAMED_PART_CHARS):
            send({"native_text": index, "part": text[start:start + STREAMED_PART_CHARS]})


_stream_index = itertools.count()


def _install_extension_hooks(prebuilt: bool = True, allowed_digests: list | None = None,
                             stream: bool = False) -> None:
    """Wrap ``load_inline``/``load``: build only in this submission's own folder (a
    ``build_directory`` elsewhere, another submission's build, is ignored), note what is built,
    load what the compile worker built (``prebuilt``) and, given ``allowed_digests``, only a
    module file it built. With ``stream`` each native text goes to the parent the moment a
    loader is handed it, before the build: code that runs later in the worker (the rest of the
    submission's module) cannot take it back, as it could empty the worker's own record."""
    from torch.utils import cpp_extension

    allowed = None if allowed_digests is None else frozenset(allowed_digests)

    def checked(file: str) -> str:
        digest = _file_digest(file)
        if allowed is not None and digest not in allowed:
            raise ImportError(f"extension {os.path.basename(file)} is not what the compile "
                              "worker built (its sources were not scanned)")
        _BUILT["digests"].append(digest)
        return file

    for name in ("load_inline", "load"):
        original = getattr(cpp_extension, name)

        def loader(*args, _original=original, _name=name, _send=report if stream else None,
                   **kwargs):
            kwargs.pop("build_directory", None)
            texts = _native_texts(_name, args, kwargs)
            if _send is not None:
                _stream_texts(texts, _send)
            _BUILT["texts"] += texts
            python_module = kwargs.get("is_python_module", True)
            file = _prebuilt_file(cpp_extension, args, kwargs) if prebuilt else None
            if file is not None:  # checked before it is loaded: no code of it runs otherwise
                module = cpp_extension._import_module_from_library(
                    os.path.basename(file)[:-3], os.path.dirname(checked(file)), python_module)
            else:
                module = _original(*args, **kwargs)
                # a library (``is_python_module=False``) comes back as its path
                built = module if _isinstance(module, str) else getattr(module, "__file__", None)
                if _isinstance(built, str) and os.path.isfile(built):
                    checked(built)
            return _ExtensionProxy(module) if _isinstance(module, types.ModuleType) else module

        setattr(cpp_extension, name, loader)
        _ORIGINALS[f"cpp_extension.{name}"] = (cpp_extension, name, loader)


# torch._dynamo, when something imports it, rewraps these with functools.wraps (benign).
_DYNAMO_REWRAPPED = {"torch.manual_seed"}


def _unwrapped_is(current, original, _getattr=getattr) -> bool:
    for _ in range(3):
        current = _getattr(current, "__wrapped__", None)
        if current is original:
            return True
    return False


# ---------------------------------------------------------------- code compiled at run time

# Who raised an audit event is read from the code's file (a submission can rename its module,
# not its code objects' files): the first frame outside the standard library. Packages whose
# own code may compile source and reach the interpreter's internals in a candidate's worker:
CODEGEN_PACKAGES = frozenset({"triton", "torch", "einops", "transformers", "kernelmill"})
# Standard-library code generators (generated methods): their text may not name the
# interpreter's reflective builtins or attributes (a red-team answer pasted a field name holding
# ``__import__`` into a dataclass's generated ``__eq__``)
STDLIB_CODEGEN = frozenset({"dataclasses", "collections"})
# Annotation evaluators: what they compile must read as a type expression, whoever asked (a
# red-team answer had torch's schema inference evaluate an annotation it assembled)
ANNOTATION_EVALUATORS = frozenset({"typing", "inspect", "annotationlib", "typing_extensions"})
REFLECTIVE_NAMES = frozenset({
    "__import__", "getattr", "setattr", "delattr", "eval", "exec", "compile", "open", "globals",
    "vars", "locals", "breakpoint", "__builtins__", "__loader__", "__spec__"})
REFLECTIVE_ATTRS = frozenset({
    "__globals__", "__builtins__", "__code__", "__closure__", "__self__", "__subclasses__",
    "__mro__", "__bases__", "__base__", "__dict__", "__func__", "__wrapped__", "gi_code",
    "gi_frame", "cr_code", "cr_frame", "ag_code", "ag_frame", "tb_frame", "tb_next", "f_back",
    "f_globals", "f_locals", "f_builtins", "f_code", "__reduce__", "__reduce_ex__"})
# Events that hand out the interpreter's own objects (frames, code objects, functions made from
# them, the collector's view of every object, settrace/setprofile, marshalled code): refused
# once the candidate's import begins unless a trusted package's code raised them (and for
# ``sys._getframe``, restricted attribute reads and class attribute writes, also when a
# standard-library helper that keeps what it reads to itself raised them: namedtuple's and
# enum's module names, typing's overload registry).
INTERNALS_EVENTS = frozenset({
    "sys._getframe", "sys._current_frames", "sys._current_exceptions", "object.__getattr__",
    "object.__setattr__", "object.__delattr__", "code.__new__", "function.__new__",
    "gc.get_referrers", "gc.get_referents", "gc.get_objects", "sys.settrace", "sys.setprofile",
    "marshal.loads", "marshal.load", "sys._getframemodulename",
    # a hook of the submission's own would see every event the harness raises, with its
    # arguments: the call's end after the ranges close, the ghost call, the counts' reply box
    # (red-team round 12 computed after the call and rewrote the counts there); a hook that
    # raises here is not added (CPython)
    "sys.addaudithook"})
# The builtins that compile a string: a trusted package's code that compiles names one of them
COMPILING_NAMES = frozenset({"compile", "exec", "eval"})
# Installed helpers that extend the standard library and count as part of it
STDLIB_LIKE = frozenset({"typing_extensions"})
# Restricted attributes whose reading hands out nothing live: code objects (making anything of
# one is refused: code.__new__, function.__new__) and a function's default values, except a
# kernelmill function's keyword defaults: that is the function's own dict, and writing into it
# rebinds what the worker bound as keyword defaults (the patch checker's builtins, a loader's
# sender)
READABLE_ATTRS = frozenset({"__code__", "gi_code", "cr_code", "ag_code", "f_code",
                            "__defaults__", "__kwdefaults__"})
FRAME_NAMING_HELPERS = frozenset({"collections", "enum", "typing", "dataclasses", "abc",
                                  "functools", "typing_extensions", "warnings"})
# What a pickle may name (``pickle.find_class``), whoever unpickles: tensors' and containers'
# rebuilders, never a builtin function or another module
UNPICKLABLE_ROOTS = ("torch", "numpy", "collections", "copyreg", "_codecs")
UNPICKLABLE_BUILTINS = frozenset({
    "set", "frozenset", "dict", "list", "tuple", "slice", "complex", "range", "bytearray", "int",
    "float", "bool", "str", "bytes", "object"})
_TYPE_NODES = (ast.Expression, ast.Name, ast.Attribute, ast.Subscript, ast.Constant, ast.Tuple,
               ast.List, ast.Load, ast.BinOp, ast.BitOr)
# the hook's own state: the installed hook has private copies (``_sealed_hook``)
_in_hook = [False]
_armed = [True]
REFUSED_COMPILES: list[str] = []
_STDLIB_DIRS: tuple[str, ...] = ()
_TRUSTED_DIRS: tuple[str, ...] = ()
_OWN_DIRS: tuple[str, ...] = ()  # kernelmill's own folders (its worker's own unpickling)


def _package_dirs() -> None:
    """Where the standard library and the trusted packages live (read before the candidate)."""
    import sysconfig

    global _STDLIB_DIRS, _TRUSTED_DIRS, _OWN_DIRS
    paths = sysconfig.get_paths()
    _STDLIB_DIRS = tuple(os.path.realpath(paths[k]) + os.sep for k in ("stdlib", "platstdlib"))

    def folders(name: str) -> list[str]:
        return [os.path.realpath(folder) + os.sep
                for folder in list(getattr(sys.modules.get(name), "__path__", None) or [])]

    # kernelmill's folders one by one: a checkout maps kernelmill.<stage> to ./<stage>
    own = [folder for name in list(sys.modules)
           if name.count(".") == 1 and name.startswith("kernelmill.") for folder in folders(name)]
    libraries = [folder for name in sorted(CODEGEN_PACKAGES - {"kernelmill"})
                 for folder in folders(name)]
    _OWN_DIRS = tuple(own)
    _TRUSTED_DIRS = (*libraries, *own)


_KINDS: dict[str, tuple[str, str]] = {}  # a code file's kind, read once (``_frame_kind``)


def _frame_kind(frame) -> tuple[str, str]:
    """(kind, module) of a frame's code: kind ``own``, ``trusted``, ``stdlib`` or ``other``;
    module is the standard-library module's name (``collections``) where that is the kind."""
    filename = frame.f_code.co_filename
    kind = _KINDS.get(filename)
    if kind is None:
        kind = _KINDS[filename] = _file_kind(filename)
    return kind


def _file_kind(filename: str) -> tuple[str, str]:
    if filename.startswith("<frozen "):
        return "stdlib", filename[8:-1].split(".")[0]
    path = os.path.realpath(filename) if filename.startswith(os.sep) else filename
    if path.startswith(_OWN_DIRS):
        return "own", ""
    if path.startswith(_TRUSTED_DIRS):
        return "trusted", ""
    for packages in ("site-packages", "dist-packages"):
        head, _, rest = path.rpartition(os.sep + packages + os.sep)
        if head:  # an installed library: it acts for whoever called it
            top = rest.split(os.sep)[0].removesuffix(".py")
            return ("stdlib", top) if top in STDLIB_LIKE else ("library", top)
    for folder in _STDLIB_DIRS:
        if path.startswith(folder) and "site-packages" not in path[len(folder):]:
            rest = path[len(folder):]
            return "stdlib", rest.split(os.sep)[0].removesuffix(".py")
    return "other", ""


def _origin(frame) -> tuple[str, str]:
    """(kind of the first frame outside the standard library and installed libraries, which act
    for whoever called them; the innermost stdlib module on the way there, or "")."""
    helper = ""
    while frame is not None:
        kind, module = _frame_kind(frame)
        if kind == "library":
            frame = frame.f_back
            continue
        if kind != "stdlib":
            return kind, helper
        if not helper and module not in ("ast", "builtins"):
            helper = module
        frame = frame.f_back
    return "other", helper


def _type_expression(text: str) -> bool:
    """``text`` reads as a type annotation (``torch.Tensor``, ``Optional[int]``, ``int | None``)
    and nothing else: no call, no dunder name."""
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError):
        return False
    return all(_isinstance(node, _TYPE_NODES) and not (
        _isinstance(node, ast.Name) and node.id.startswith("__") or
        _isinstance(node, ast.Attribute) and node.attr.startswith("__") or
        _isinstance(node, ast.BinOp) and not _isinstance(node.op, ast.BitOr))
        for node in ast.walk(tree))


def _reflective(text: str) -> bool:
    """``text`` names a reflective builtin or attribute (or does not parse)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return True
    return any(_isinstance(node, ast.Name) and node.id in REFLECTIVE_NAMES or
               _isinstance(node, ast.Attribute) and node.attr in REFLECTIVE_ATTRS
               for node in ast.walk(tree))


def _refuse(why: str) -> None:
    REFUSED_COMPILES.append(why)
    raise RuntimeError(f"kernelmill: refused {why}")


def _compile_allowed(source, frame) -> tuple[bool, str]:
    kind, helper = _origin(frame)
    text = source.decode("utf-8", "replace") if _isinstance(source, bytes) else source
    if helper in ANNOTATION_EVALUATORS:
        return _type_expression(text), text
    trusted = kind in ("trusted", "own")
    if helper in STDLIB_CODEGEN:
        return trusted or not _reflective(text), text
    # a trusted package's own compile (its code names compile, exec or eval: one handed
    # ``compile`` as a callable, through a lazy ``map`` that torch's ``ModuleList.extend``
    # iterated, compiled for whoever handed it over), or an import; a standard-library helper
    # that compiles what it is handed (timeit under torch.utils.benchmark) compiles it for
    # whoever handed it
    if helper == "importlib" or (trusted and not helper and _names_compile(frame)):
        return True, text
    return _type_expression(text), text


def _names_compile(frame) -> bool:
    """Whether the innermost frame's own code names a builtin that compiles a string."""
    return not COMPILING_NAMES.isdisjoint(frame.f_code.co_names)


def _names_it(frame, event: str) -> bool:
    """Whether the innermost frame's own code names the function ``event`` reports (``_getframe``
    for ``sys._getframe``): a standard-library helper that asks for a frame does so in its own
    code; one that was handed ``sys._getframe`` as a callable (a ``ChainMap`` over a mapping whose
    ``__getitem__`` it is) does not, and acts for whoever handed it over."""
    return event.rpartition(".")[2] in frame.f_code.co_names


def _internals_allowed(event: str, args: tuple, frame) -> bool:
    if event == "object.__getattr__" and str((tuple(args) + ("", ""))[1]) in READABLE_ATTRS:
        return not (args[1] == "__kwdefaults__" and _type(args[0]) is types.FunctionType and
                    _file_kind(args[0].__code__.co_filename)[0] == "own" and
                    _origin(frame)[0] not in ("own", "trusted"))
    kind, helper = _origin(frame)
    if event == "pickle.find_class":  # the worker's own messages; else what is found decides
        module, name = (str(a) for a in (tuple(args) + ("", ""))[:2])
        if kind == "own":
            return True
        if module == "builtins":
            return name in UNPICKLABLE_BUILTINS
        return module.split(".")[0] in UNPICKLABLE_ROOTS and not name.startswith("__")
    if kind in ("trusted", "own") or helper == "importlib":
        return True
    if event.startswith("ctypes."):  # foreign calls and raw memory: trusted packages only
        return False
    if event in ("sys._getframe", "sys._getframemodulename"):
        return helper in FRAME_NAMING_HELPERS and _names_it(frame, event)
    if event == "object.__getattr__":  # a frame or code read for whoever handed the helper a
        # getattr: functools.update_wrapper copying ``tb_frame``, ``map(getattr, ...)`` drained
        # in ``UserList.__init__`` (red-team round 7); a helper's own read names the attribute
        return helper in FRAME_NAMING_HELPERS and \
            _names_it(frame, "." + str((tuple(args) + ("", ""))[1]))
    return event == "object.__setattr__" and helper in FRAME_NAMING_HELPERS


def _audit(event: str, args: tuple) -> None:
    """Refuse code compiled from a string at run time and, once the candidate's import has
    begun, the events that hand out the interpreter's own objects (``INTERNALS_EVENTS``,
    ``pickle.find_class`` beyond tensors and containers, every ``ctypes`` event: a foreign call
    to ``PyEval_GetFrame`` is a frame), unless a trusted package's code raised them
    (``_compile_allowed``, ``_internals_allowed``). A submission that reaches
    eval by any route, or a frame, a code object or the collector, owns the worker's facts:
    this stops that at the interpreter, whatever route asked for it."""
    if _in_hook[0]:
        return
    if event.startswith("kernelmill."):
        _observe(event, args)
        return
    compiling = event == "compile"
    if not compiling and not (_armed[0] and (event in INTERNALS_EVENTS or
                                             event == "pickle.find_class" or
                                             event.startswith("ctypes."))):
        return
    if compiling and not _isinstance(args[0] if args else None, (str, bytes)):
        return
    _in_hook[0] = True
    try:
        frame = sys._getframe(1)
        if compiling:
            allowed, text = _compile_allowed(args[0], frame)
        else:
            allowed = _internals_allowed(event, args, frame)
        if allowed:
            return
        kind, helper = _origin(frame)
        by = f"{kind} code{f' through {helper}' if helper else ''}"
        why = f"code compiled at run time by {by}: {text[:80]!r}" if compiling else \
            f"{event} raised by {by} ({frame.f_code.co_filename}:{frame.f_code.co_name})"
    finally:
        _in_hook[0] = False
    _refuse(why)


# What the observers count (``_observe``), in the sealed copy of this namespace only
_STATE: dict[str, Any] = {}
_AUTH: dict[str, frozenset] = {}  # who may raise which control event: the code objects


def _observe(event: str, args: tuple) -> None:
    """The observers' events (``kernelmill.*``), in the sealed hook: counts only grow, and only
    inside a candidate call; the events that open or close a call, the ghost call or a launch
    count only from the harness's own code (the code object that raised them), so a submission
    that raises them, or calls that code itself, opens nested ranges it must also close."""
    state = _STATE
    if event == "kernelmill.read":
        # the counts for the harness only: ``_observed`` called by one of the readers in
        # ``_AUTH``. A submission that read them could tell the ghost call by a skipped
        # sentinel launch (``ghosted``) and be honest there alone.
        _in_hook[0] = True
        try:
            raiser, reader = sys._getframe(2), sys._getframe(3)
            allowed = raiser.f_code in _AUTH["kernelmill.read"] and \
                reader.f_code in _AUTH["kernelmill.readers"]
        except ValueError:
            allowed = False
        finally:
            _in_hook[0] = False
        if not allowed:  # its own refusals only
            args[0].append({"refused": list(REFUSED_COMPILES), "armed": True})
            return
        args[0].append({**{name: state[name] for name in _COUNTED},
                        "in_launch": state["in_launch"] > 0, "armed": True,
                        "kernel_args": list(state["kernel_args"]),
                        "refused": list(REFUSED_COMPILES)})
        return
    active = state["depth"] > 0
    if event == "kernelmill.count":
        name, n = args
        if name in ("host_alias", "host_view"):  # from the import on, in a call or not,
            _in_hook[0] = True  # unless the harness (its late data) or a trusted package made it
            try:
                kind = _origin(sys._getframe(3))[0]
            finally:
                _in_hook[0] = False
            state[name] += kind not in ("own", "trusted")
        elif active and name == "foreign_memory":
            state[name] += max(1, int(n))
        if name == "thread_starts":  # also from the import on, by the submission's own code
            _in_hook[0] = True
            try:
                kind = _origin(sys._getframe(3))[0]
            finally:
                _in_hook[0] = False
            state["threads_started"] += kind not in ("own", "trusted")
        if active and name in ("thread_starts", "host_access"):
            if name == "host_access" and state["in_launch"] and state["interpreted"]:
                # the interpreter's own host copies are not the submission's; the submission's
                # code run inside a launch (a pre-run hook computing in NumPy on those copies,
                # red-team round 9) is
                _in_hook[0] = True
                try:
                    kind = _origin(sys._getframe(3))[0]
                finally:
                    _in_hook[0] = False
                if kind in ("own", "trusted"):
                    return
            state[name] += max(1, int(n))
    elif event == "kernelmill.state":
        if active and args[0] != state["call_state"]:
            state["dispatch_state"] += 1
    elif event == "kernelmill.launch":
        kind, spans, dispatch, box = args
        if not active or kind not in ("launches", "ext_calls"):
            return
        if kind == "launches" and state["ghost"] > 0:
            state["ghosted"] += 1
            box.append("skip")
            return
        if kind == "ext_calls":  # a launch counts once it ran (``kernelmill.launched``)
            state[kind] += 1
        state["kernel_args"].extend((int(lo), int(hi)) for lo, hi in spans)
        if dispatch != state["call_state"]:
            state["dispatch_state"] += 1
        box.append("active")
    elif event in _AUTH:
        _in_hook[0] = True
        try:
            caller = sys._getframe(2).f_code
        finally:
            _in_hook[0] = False
        if caller not in _AUTH[event]:
            return
        if event == "kernelmill.launched":
            state["launches"] += active
            return
        step = int(args[0])
        if event == "kernelmill.call" and step == 0:
            state["call_state"] = args[1]
            return
        key = {"kernelmill.call": "depth", "kernelmill.ghost": "ghost",
               "kernelmill.in_launch": "in_launch"}[event]
        if key == "depth" and step > 0 and state["depth"] == 0:
            state["kernel_args"].clear()
        state[key] = max(0, state[key] + (1 if step > 0 else -1))


# The functions the installed hook runs: copies over a private copy of this module's namespace
# (``_sealed_hook``). Red-team answers set the hook's own flag (``_in_hook``), its cache of
# file kinds and its constants through this module, which any submission can reach; the hook
# that is installed reads none of them, nor a builtin or a ``sys``/``os``/``ast`` function
# rebound after it was installed.
_SEALED = ("_audit", "_observe", "_internals_allowed", "_origin", "_frame_kind", "_file_kind",
           "_compile_allowed", "_names_compile", "_names_it", "_type_expression", "_reflective",
           "_refuse")


def _module_copy(module, **members) -> types.SimpleNamespace:
    return types.SimpleNamespace(**{**vars(module), **members})


def _readers_of(name: str) -> frozenset:
    """The code objects of this module's functions and methods (nested ones too) that call
    ``name``: the harness's own readers of the hook's counts. Derived, not listed: a reader left
    off a list was refused its counts, and failed only where it ran (``_Run.timed`` during a
    CUDA graph's capture, never reached on a CPU)."""
    found, seen = set(), set()

    def visit(code) -> None:
        if id(code) in seen:
            return
        seen.add(id(code))
        if name in code.co_names and code.co_name != name:
            found.add(code)
        for const in code.co_consts:
            if _isinstance(const, types.CodeType):
                visit(const)

    for value in list(globals().values()):
        members = vars(value).values() if _isinstance(value, type) and \
            value.__module__ == __name__ else [value]
        for member in members:
            member = getattr(member, "__func__", member)  # static and class methods
            if _isinstance(member, property):
                member = member.fget
            if _isinstance(member, types.FunctionType) and member.__module__ == __name__:
                visit(member.__code__)
    return frozenset(found)


def _sealed_hook():
    namespace = dict(globals())
    namespace.update(
        __builtins__=dict(vars(builtins)), sys=_module_copy(sys), ast=_module_copy(ast),
        os=_module_copy(os, path=_module_copy(os.path)), _in_hook=[False], _armed=[True],
        _KINDS={}, REFUSED_COMPILES=[],
        _STATE={**dict.fromkeys(_COUNTED, 0), "depth": 0, "ghost": 0, "in_launch": 0,
                "call_state": "", "kernel_args": [],
                "interpreted": os.environ.get("TRITON_INTERPRET") == "1"},
        _AUTH={"kernelmill.read": frozenset({_observed.__code__}),
               "kernelmill.readers": _readers_of("_observed"),
               "kernelmill.call": frozenset({_Run.invoke.__code__}),
               "kernelmill.ghost": frozenset({_Run.ghost.__code__}),
               "kernelmill.in_launch": _LAUNCH_CODES, "kernelmill.launched": _LAUNCH_CODES})
    for name in _SEALED:
        original = namespace[name]
        namespace[name] = types.FunctionType(original.__code__, namespace, original.__name__,
                                             original.__defaults__, original.__closure__)
    return namespace["_audit"]


def refuse_runtime_code() -> None:
    """Install the sealed ``_audit`` (an audit hook stays for the life of the process), armed:
    call it just before the candidate's import. Its state is out of every module's reach:
    ``_observed`` reads a copy."""
    _package_dirs()
    sys.addaudithook(_sealed_hook())


# Every function and class bound on a module loaded before the candidate's import (the
# standard library's, torch's, triton's, builtins, kernelmill's own) and the methods and
# descriptors of every class those modules define (torch.no_grad's ``__exit__``, a dispatch
# mode's ``__enter__``), as they were then (``snapshot_modules``): one rebound since is a
# patch, whoever looks it up (the worker binds what it calls at import; torch's own code,
# ``torch.save`` and the witness look many up). Setting an attribute on a module or a class
# raises no audit event, so this is how such a patch is seen (about 3,800 classes and 58,000
# entries with torch and triton loaded: 160 ms to take, 15 ms to check on a 2-core host).
# Red-team answers reached kernelmill's modules through the standard library's private aliases
# and rewrote the worker's result encoder, and wrapped ``json.dumps`` and
# ``torch.serialization._save`` to rewrite the timing reports and the facts. The caller keeps
# the snapshot (a tuple in its own frame), and no module holds a copy (building one cost 0.26
# CPU-s of an honest CPU grade's 2.0, and nothing read it).
_CLASSES_WATCHED = (torch.Tensor, torch.nn.Module)


def _callables(owner) -> list[tuple[Any, str, Any]]:
    """What ``owner`` binds that code calls through it: functions and classes, and modules (a
    module rebound to a proxy, ``torch._C`` whose ``_set_grad_enabled`` ran the answer after the
    observed ranges closed, red-team round 7, is every function under it rebound)."""
    try:
        namespace = owner.__dict__
    except Exception:  # noqa: BLE001 — a module object without a namespace has nothing to watch
        return []
    return [(owner, name, value) for name, value in list(namespace.items())
            if callable(value) or issubclass(_type(value), types.ModuleType)]


def _class_members(cls) -> list[tuple[Any, str, Any]]:
    return [(cls, attr, member) for attr, member in list(vars(cls).items())
            if callable(member) or _isinstance(member, (staticmethod, classmethod, property))]


def _owners() -> list[tuple[Any, Any]]:
    """What the snapshot watches, with the function that lists its entries: every loaded
    module, the classes each defines, and ``_CLASSES_WATCHED``."""
    # Triton's interpreter (CPU) rebinds triton.language's builtins for each launch, and leaves
    # some rebound: those modules are the interpreter's to change there.
    interpreted = os.environ.get("TRITON_INTERPRET") == "1"
    owners = []
    for module_name, module in list(sys.modules.items()):
        if not _isinstance(module, types.ModuleType) or \
                (interpreted and module_name.startswith("triton.language")):
            continue
        owners.append((module, _callables))
        classes = _warm_classes(module, module_name)
        if classes is None:
            classes = _module_classes(module, module_name)
        owners.extend((cls, _class_members) for cls in classes)
    owners.extend((cls, _class_members) for cls in _CLASSES_WATCHED)
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
_WARM: dict[int, tuple] = {}
_WARM_CLASSES: dict[tuple[int, str], tuple] = {}  # and each module's classes, by (id, name)


def zygote_warm() -> None:
    """Run by the zygote once its preloads are in, before it forks any worker."""
    _WARM.clear()
    _WARM_CLASSES.clear()
    for module_name, module in list(sys.modules.items()):
        values = _namespace_values(module) if _isinstance(module, types.ModuleType) else None
        if values is not None:
            _WARM_CLASSES[(id(module), module_name)] = (
                module, values, tuple(_module_classes(module, module_name)))
    for owner, lister in _owners():
        values = _namespace_values(owner)
        if values is not None:
            _WARM[id(owner)] = (owner, values, tuple(lister(owner)))


def _namespace_values(owner) -> tuple | None:
    try:
        return tuple(owner.__dict__.values())
    except Exception:  # noqa: BLE001 — no namespace: nothing to reuse
        return None


def _warm_entries(owner) -> tuple | None:
    """The zygote's entries of ``owner`` if its namespace is as the zygote saw it, else None."""
    return _still_warm(_WARM.get(id(owner)), owner)


def _still_warm(warm: tuple | None, owner, _is=operator.is_) -> tuple | None:
    """A zygote-time listing ``(owner, values, listed)``'s ``listed`` while ``owner``'s
    namespace holds the same values (by identity, in order), else None."""
    if warm is None or warm[0] is not owner:
        return None
    values = _namespace_values(owner)
    if values is None or len(values) != len(warm[1]) or not all(map(_is, values, warm[1])):
        return None
    return warm[2]


def _module_entries() -> list[tuple[Any, str, Any]]:
    entries = []
    for owner, lister in _owners():
        warm = _warm_entries(owner)
        entries.extend(warm if warm is not None else lister(owner))
    return entries


def _owned_by_us(owner) -> bool:
    """A kernelmill module or class, or builtins."""
    name = owner.__name__ if issubclass(_type(owner), types.ModuleType) else \
        vars(owner).get("__module__", "")
    return name == "builtins" or str(name).startswith("kernelmill.")


def _module_shapes() -> tuple:
    """Each loaded module with its type and the names it binds: how a module is reached beside
    its callables (a module ``__getattr__`` added, a non-callable entry deleted so that the
    lookup falls through to it, red-team round 13; a key that is not a ``str``, whose ``__eq__``
    runs at every lookup of the name it equals, round 11; a module's ``__class__`` swapped for
    one with a ``__getattribute__``)."""
    interpreted = os.environ.get("TRITON_INTERPRET") == "1"
    return tuple((module, _type(module), module_name, frozenset(vars(module)))
                 for module_name, module in list(sys.modules.items())
                 if _isinstance(module, types.ModuleType) and
                 not (interpreted and module_name.startswith("triton.language")))


_MODULE_HOOKS = ("__getattr__", "__dir__")  # names a module calls when a lookup misses


def snapshot_modules() -> tuple:
    import triton
    import triton.language
    from torch.utils import cpp_extension  # noqa: F401 — loaded now, so it is watched

    entries = _module_entries()
    originals = tuple((label, *entry) for label, entry in _ORIGINALS.items())
    return tuple(entries), originals, _module_shapes()


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
    refused to a submission): a submission's ``vars`` that returned the originals hid every
    patch, its own included (red-team round 6)."""
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


def active_modes() -> int:
    """Torch function/dispatch modes pushed by someone else (we push ours only while tracing)."""
    return int(torch._C._len_torch_function_stack()) + int(torch._C._len_torch_dispatch_stack())


# ---------------------------------------------------------------- building sources

def to_device(values: list, device: str) -> list:
    return [_tensor_to(v, device, copy=True) if _type(v) is _Tensor else v for v in values]


def to_cpu(value):
    return _tensor_to(_tensor_detach(value), "cpu", copy=True)


def transform(values: list, dist: str) -> list:
    """Input distributions: ``natural`` (as drawn) or ``affine`` (floats scaled and shifted)."""
    if dist == "natural":
        return values
    out = []
    for value in values:
        if _type(value) is _Tensor and value.is_floating_point():
            value = value * 1.5 + 0.25
        out.append(value)
    return out


# ---------------------------------------------------------------- timing

def device_info(device: str) -> dict:
    info = {"device": device, "torch": str(torch.__version__)}
    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        info["name"] = props.name
        clock_khz = getattr(props, "memory_clock_rate", None)
        bus_bits = getattr(props, "memory_bus_width", None)
        if clock_khz and bus_bits:
            info["bandwidth_gbs"] = 2 * clock_khz * 1e3 * bus_bits / 8 / 1e9
    return info


def _timer_options(payload: dict) -> dict:
    """``measure.Timer`` options from the policy's timing settings (the rest are the window's)."""
    settings = payload.get("timing_settings") or {}
    return {k: settings[k] for k in ("warmup", "graph", "sample_ms") if k in settings}


def _serve_timing(fn, device: str, payload: dict, witness: Witness | None = None,
                  unseen=None, send=None, after_work=None, after_sample=None):
    """Prepare a timer for ``fn``, tell the parent it is ready, answer its window's commands.
    With a captured CUDA graph the witness pauses for the window: replays run no candidate
    Python, and recording every replayed kernel cost seconds of reading afterwards."""
    timer = M.Timer(fn, device, **_timer_options(payload))
    ready = timer.prepare()
    if timer.graph is None:  # one call per sample: ``after_sample`` may look between calls
        timer.after_sample = after_sample
    else:
        # A graph's rounds and loops are replays: no candidate Python runs between them, so
        # nothing can set a mark there and clear it before the check after timing, which
        # sees any change the replays' kernels leave (and the hot replay's calls, any work a
        # kernel skips). Comparing every input on the host after each round cost 0.6-0.9 CPU s
        # per submission on an H100 host, inside the exclusive window (py-spy, 2026-11-28).
        after_work = None
    paused = witness is not None and timer.graph is not None
    if paused:
        witness.pause()
    send = send or report
    send({"ready": ready})
    try:
        # (with a graph, ``unseen`` replays a one-call graph: no candidate Python runs either)
        return timer, M.serve_window(timer, receive, send, unseen, after_work)
    finally:
        if paused:
            witness.resume()


# ---------------------------------------------------------------- the reference run

# Host threads of a GPU grading worker's own tensor work (copies to the host, finiteness,
# digests): a group's nine workers start together, and each with torch's default of one intra-op
# thread per core kept the host's 16 cores 97-99% busy at the 90th percentile while on average
# 43-58% (H100 host, 2026-11-27): the bursts, not the work, set the pace.
GPU_WORKER_THREADS = 2


def _few_host_threads(device: str) -> None:
    if device.startswith("cuda"):
        torch.set_num_threads(max(1, min(torch.get_num_threads(), GPU_WORKER_THREADS)))


def reference_task(payload: dict) -> dict:
    device = payload["device"]
    _few_host_threads(device)
    mark_stage("reference build")
    ns = load_namespace(payload["source"], "reference")
    if "runs" in payload:  # several fresh references (a group's members), one CUDA context
        runs = []
        with M.GpuLock(payload.get("lock")).shared():
            for run in payload["runs"]:
                result = _reference_trials(ns, device, {**payload, **run})
                del result["_model"]
                runs.append(result)
        return {"runs": runs}
    # GPU work that is not timed holds the GPU's lock shared: no other grade's timing window
    # runs meanwhile (reference forwards can be the heaviest work on the device).
    with M.GpuLock(payload.get("lock")).shared():
        result = _reference_trials(ns, device, payload)
    if payload.get("time", True) and payload.get("inductor"):
        _inductor_timing(device, payload, result)
    del result["_model"]
    return result


def _reference_trials(ns: dict, device: str, payload: dict) -> dict:
    _manual_seed(payload["init_seed"])
    init_inputs = list(ns["get_init_inputs"]())
    _manual_seed(payload["init_seed"])
    model = ns["Model"](*init_inputs).to(device)
    state = {k: to_cpu(v) for k, v in model.state_dict().items()}
    trials = []
    mark_stage("reference forward")
    natural_finite = True
    ops: list[str] = []
    work: dict = {}
    for spec in payload["trials"]:
        inputs = transform(draw_inputs(ns, device, spec["seed"]), spec["dist"])
        kept = [to_cpu(v) if _type(v) is _Tensor else v for v in inputs]
        device_inputs = to_device(inputs, device)
        _manual_seed(forward_seed(payload["init_seed"]))
        tracer = _OpTrace() if not trials else None
        with torch.no_grad():
            if tracer is not None:
                with tracer:
                    out = model(*device_inputs)
                ops = tracer.ops
                work = {"flops": tracer.flops, "thin_gemms": len(tracer.thin_gemms)}
            else:
                out = model(*device_inputs)
            structure, items = flatten_outputs(out)
        sync(device)
        # finiteness where the outputs are (on a GPU: a kernel, not a host scan per trial)
        finite = all(bool(torch.isfinite(t).all()) for t in items
                     if _isinstance(t, torch.Tensor) and t.is_floating_point())
        outputs = [to_cpu(t) if _isinstance(t, torch.Tensor) else t for t in items]
        if spec["dist"] == "natural":
            natural_finite = natural_finite and finite
        usable = finite or (spec["dist"] == "natural" or not natural_finite)
        trials.append({"seed": spec["seed"], "dist": spec["dist"], "inputs": kept,
                       "hidden": bool(spec.get("hidden")),
                       "outputs": outputs, "structure": structure, "usable": usable,
                       "device_types": [t.device.type for t in items
                                        if _isinstance(t, torch.Tensor)]})
    return {"init_inputs": init_inputs, "state_dict": state, "trials": trials,
            "info": device_info(device), "ops": ops, **work, "_model": model}


def draw_inputs(ns: dict, device: str, seed: int) -> list:
    """A trial's inputs: the problem's ``get_inputs()`` under ``seed``, its tensors made on
    the device the trial runs on (the same distributions; a GPU draws 16 M normal values in
    microseconds where the host took 0.15 s, times every tensor, trial and group member, all
    grades of a GPU sharing its host's cores). A ``get_inputs`` that needs host tensors (it
    calls ``.numpy()``, say) draws them on the host."""
    _manual_seed(seed)
    if device.startswith("cuda"):
        try:
            with torch.device(device):
                return list(ns["get_inputs"]())
        except Exception:  # noqa: BLE001 — drawn on the host below, as written
            _manual_seed(seed)
    return list(ns["get_inputs"]())


def _inductor_timing(device: str, payload: dict, result: dict) -> None:
    """Eager and Inductor timed together, once per reference (the verdict's eager time comes
    from the candidate's window; Inductor's from this ratio)."""
    model = result["_model"]
    mark_stage("reference inductor")
    inputs = to_device(result["trials"][0]["inputs"], device)

    def eager():
        with torch.no_grad():
            return model(*inputs)

    try:
        compiled = torch.compile(model)

        def inductor():
            with torch.no_grad():
                return compiled(*inputs)

        inductor()  # compiles, outside the timing lock
        sync(device)
        mark_stage("reference inductor timing")
        with M.GpuLock(payload.get("lock")).exclusive():
            result["eager"] = M.measure(eager, device, **_timer_options(payload))
            result["inductor"] = M.measure(inductor, device, **_timer_options(payload))
    except Exception as exc:  # noqa: BLE001 — Inductor failing is a fact, not a crash
        result["inductor_error"] = f"{type(exc).__name__}: {exc}"[:500]


def reference_timing_task(payload: dict) -> dict:
    """Time the reference's eager forward in a parent-driven window (``validate.window``): the
    model built from the same seeds as ``reference_task``, on the inputs the parent sends (those
    the candidate is timed on). Never sees candidate code."""
    device = payload["device"]
    _few_host_threads(device)
    mark_stage("reference build")
    ns = load_namespace(payload["source"], "reference")
    if not M.await_gpu(receive, report):
        return {"timing": None}
    _manual_seed(payload["init_seed"])
    init_inputs = list(ns["get_init_inputs"]())
    _manual_seed(payload["init_seed"])
    model = ns["Model"](*init_inputs).to(device)
    placements = M.placed_copies(to_device(payload["inputs"], device), device)
    turn = itertools.count()

    def eager():  # on each placement of the inputs in turn, as the candidate's timed calls
        inputs = placements[next(turn) % len(placements)]
        with torch.no_grad():
            return model(*inputs)

    mark_stage("reference timing")
    _timer, timing = _serve_timing(eager, device, payload)
    return {"timing": timing}


# ---------------------------------------------------------------- the candidate run

class _OpTrace(TorchDispatchMode):
    def __init__(self, watched: list | None = None):
        super().__init__()
        self.ops: list[str] = []

        self.copy_spans: list[tuple[int, int]] = []
        # the memory of the call's floating-point inputs of more than one element: an element
        # of one read on the host (``.item()``, ``float(x[i])``, a comparison's truth) is a key
        # to the inputs' values (red-team round 25 cached its answer under 8 such values)
        self.watched = list(watched or [])
        # and what any op wrote from that memory, while its storage is alive: a value of
        # the inputs carried anywhere (a copy, a fill, a view, an arithmetic op) is as good a
        # key (red-team rounds 26-27: ``clone``, ``fill_.Tensor``, ``lift_fresh_copy``)
        self.derived: list[tuple[int, int, Any]] = []
        self.input_reads = 0
        # vendor work: FLOPs by torch's formulas, and GEMMs whose inner dimension is 0 or 1
        # (an elementwise op in a GEMM's name: red-team round 29 ran a ReLU as
        # ``_addmm_activation`` over an empty inner dimension)
        self.flops = 0
        self.thin_gemms: list[str] = []

    def _touches_watched(self, tensor) -> bool:
        spans = _spans([tensor]) if _type(tensor) is _Tensor else _storage_spans(tensor)
        return any(lo < b and a < hi for lo, hi in spans for a, b in self.watched) or \
            any(lo < b and a < hi and ref() is not None  # the latest first: most ops read
                for lo, hi in spans for a, b, ref in reversed(self.derived))  # the op before's

    def _taint(self, func, args, kwargs, out) -> None:
        """Whatever an op returned or wrote (by its schema) is watched once any tensor or
        storage it was given touches watched memory."""
        given = _op_operands(args, kwargs)
        if not given or not any(self._touches_watched(value) for value in given):
            return
        written = [value for value in _op_outputs(out) if _type(value) is _Tensor]
        written.extend(_written_arguments(func, args, kwargs))
        for tensor in written:
            for lo, hi in _spans([tensor]):
                # alive while any tensor holds that memory (torch keeps one Python object per
                # storage while it lives): a temporary view's end does not end the watch
                self.derived.append((lo, hi, _weak_ref(_tensor_storage(tensor))))

    def _count_work(self, func, base: str, args, kwargs: dict, out) -> None:
        formula = _FLOP_FORMULAS.get(getattr(func, "_overloadpacket", None))
        if formula is not None:
            try:
                self.flops += int(formula(*args, **kwargs, out_val=out))
            except Exception:  # noqa: BLE001 — an operand the formula cannot read: not counted
                pass
        inner = _GEMM_INNER.get(base)
        if inner is not None and len(args) > inner and _type(args[inner]) is _Tensor and \
                args[inner].dim() >= 1 and args[inner].shape[-1] <= 1:
            self.thin_gemms.append(str(func))

    def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
        name = str(func)
        self.ops.append(name)
        if self.watched and "_local_scalar_dense" in name and args and \
                _type(args[0]) is _Tensor:
            if self._touches_watched(args[0]):
                self.input_reads += 1
        out = func(*args, **(kwargs or {}))
        base = name.split(".")[1] if "." in name else ""  # aten.copy_.default: copy_
        self._count_work(func, base, args, kwargs or {}, out)
        if self.watched:
            self._taint(func, args, kwargs or {}, out)
        if base in _COPY_OPS and not _observed().get("in_launch"):
            target = args[0] if base == "copy_" and args else out
            self.copy_spans.extend(_spans([target]))
            _count_foreign([*args, out])
        return out


# torch's FLOP formulas (GEMMs, convolutions, attention), taken before any submission's import
_FLOP_FORMULAS = dict(_torch_flop_registry)
# GEMM-class ops, each with the index of the operand whose last dimension is the inner one
_GEMM_INNER = {"mm": 0, "bmm": 0, "matmul": 0, "mv": 0, "dot": 0, "vdot": 0, "_scaled_mm": 0,
               "linear": 0, "addmm": 1, "addbmm": 1, "baddbmm": 1, "addmv": 1,
               "_addmm_activation": 1}


# the copies an output may be made by (``output_by_copy``): every ATen copy the op taxonomy
# allows (``lift_fresh_copy`` was missing: red-team round 27)
_COPY_OPS = {"copy_", "clone", "_to_copy", "_copy_from", "_copy_from_and_resize", "copy",
             "lift_fresh_copy"}
_UntypedStorage = torch.UntypedStorage
_TypedStorage = getattr(torch, "TypedStorage", None)
_ustorage_ptr = torch.UntypedStorage.data_ptr
_ustorage_nbytes = torch.UntypedStorage.nbytes


def _storage_spans(value) -> list[tuple[int, int]]:
    """The memory behind a storage handed to an op (exact storage types only)."""
    if _type(value) is _TypedStorage:
        value = _getattr_static(value, "_untyped_storage", None)
    if _type(value) is not _UntypedStorage or not _ustorage_nbytes(value):
        return []
    return [(_ustorage_ptr(value), _ustorage_ptr(value) + _ustorage_nbytes(value))]


def _op_operands(args, kwargs: dict) -> list:
    """The tensors and storages an op was given, one list or tuple deep."""
    found = []
    for value in (*args, *kwargs.values()):
        items = value if _type(value) in (list, tuple) else (value,)
        found.extend(item for item in items
                     if _type(item) in (_Tensor, _UntypedStorage, _TypedStorage))
    return found


def _op_outputs(out) -> list:
    return list(out) if _type(out) in (list, tuple) else [out]


def _written_arguments(func, args, kwargs: dict) -> list:
    """The tensors an op writes in place or as ``out=``, by its schema's alias annotations."""
    try:
        schema = func._schema.arguments
    except Exception:  # noqa: BLE001 — no schema: what it returned only
        return []
    written = []
    for index, argument in enumerate(schema):
        alias = argument.alias_info
        if alias is None or not alias.is_write:
            continue
        value = args[index] if index < len(args) else kwargs.get(argument.name)
        items = value if _type(value) in (list, tuple) else (value,)
        written.extend(item for item in items if _type(item) is _Tensor)
    return written


# TorchDispatchMode wraps __torch_dispatch__ in a lazy torch._dynamo.disable, whose first call
# imports torch._dynamo (seconds per worker). Nothing here runs under Dynamo: call it directly.
_inner = getattr(_OpTrace.__dict__["__torch_dispatch__"], "__wrapped__", None)
if _inner is not None:
    _inner.__dynamo_disable = _inner

def _tasks() -> set[str]:
    try:
        return set(_listdir("/proc/self/task"))
    except OSError:
        return set()


def _task_name(tid: str) -> str:
    try:
        with open(f"/proc/self/task/{tid}/comm") as handle:
            return handle.read().strip()
    except OSError:
        return "?"


def _live_children() -> list[int]:
    me, found = str(os.getpid()), []
    for entry in _listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if fields[1].decode() == me and fields[0] not in (b"Z", b"X"):
            found.append(int(entry))
    return found


_storage_resizable = torch.UntypedStorage.resizable
_storage_shared = torch.UntypedStorage.is_shared


def _foreign(value) -> bool:
    """A tensor over host memory torch's allocator did not hand out: NumPy's (``from_numpy``,
    ``asarray``), a Python buffer's, a file's or a shared mapping's (``from_file``, a storage
    over a memfd, ``share_memory_``). Python reaches such memory with no tensor method at all
    (red-team rounds 14-15 computed the answer in NumPy there, between a copy in and a flag
    kernel), so whichever constructor made it, a kernel's argument, a copy's end or an output
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


_dispatch_dump = torch._C._dispatch_dump


def _python_only(op: str) -> bool:
    """An op the candidate registered whose every kernel is a Python function (``torch.library``'s
    ``impl`` or ``custom_op``: the dispatcher holds them boxed, with no native signature): it is a
    wrapper, not a kernel, and stands for none (red-team round 16 computed the answer on the host
    in such a body, with no launch at all)."""
    parts = op.replace("::", ".", 1).split(".")
    if len(parts) < 2:
        return False
    name = f"{parts[0]}::{parts[1]}" + (f".{parts[2]}" if len(parts) > 2 and
                                         parts[2] != "default" else "")
    try:
        dump = _dispatch_dump(name)
    except Exception:  # noqa: BLE001 — not an op the dispatcher knows
        return False
    kernels = [line for line in dump.splitlines()
               if ": registered at " in line and not line.startswith("debug:")]
    return bool(kernels) and not any("unboxed" in line for line in kernels)


def _spans(values: list) -> list[tuple[int, int]]:
    return [span for value in values if _type(value) is _Tensor
            for span in _storage_spans(_tensor_storage(value))]


def _load_weights(model, state: dict) -> str:
    """Give the candidate the reference's weights: by name, else by order when shapes agree."""
    mine = model.state_dict()
    if not state:
        return "none"
    if set(mine) == set(state) and all(mine[k].shape == state[k].shape for k in state):
        model.load_state_dict(state)
        return "by name"
    theirs = list(state.values())
    if len(mine) == len(theirs) and all(a.shape == b.shape for a, b in zip(mine.values(), theirs)):
        with torch.no_grad():
            for target, value in zip(mine.values(), theirs):
                _tensor_copy(target, value)
        return "by order"
    return "seed only"


HELD_REFS = 64

# Every forward starts this many Python frames deep, whichever of the grader's paths called it
# (a checked call, the timer's rounds, its clock check, the unseen-input check, the ghost): a
# pure-Python recursion that counts the frames left before ``RecursionError`` read each kind of
# call apart and did half the work in scored calls only (red-team round 20). The deepest path
# to ``_Run.invoke`` is about 40 frames.
CALL_DEPTH = 128


def _stack_depth(_getframe=sys._getframe) -> int:
    """Frames on the stack from the caller's down to the thread's first."""
    frame, depth = _getframe(1), 0
    while frame is not None:
        depth += 1
        frame = frame.f_back
    return depth


def _at_depth(left: int, fn, args: tuple):
    """``fn(*args)`` called ``left`` frames further down than this call (no deeper when
    ``left`` is not positive)."""
    if left > 0:
        return _at_depth(left - 1, fn, args)
    return fn(*args)


def _held_alike(value) -> list:
    """References to ``value`` (the last call's output) and to each item of it (a tuple or list
    of tensors) that bring each one's reference count to the same number during every call,
    whoever else holds it: the timer keeps its last output, an unseen-input check a local, a
    checked call neither. A forward that read its last output's count (through a raw address,
    no tensor method at all) told scored calls from checked ones (red-team round 19)."""
    if value is None:
        return []
    held = []
    for item in ([value, *value] if _type(value) in (tuple, list) else [value]):
        held.extend([item] * max(0, HELD_REFS - _getrefcount(item)))
    return held


def _uneven_launches(captured: list) -> dict:
    """``{"even_launches_off": {call, found, first}}`` when the captured calls (``captured``:
    the Triton launches and extension calls of each, in order: the timing graph's and the
    graphs that size it) did not all launch alike; ``{}`` when they did. The timing graph's
    kernels are split into its calls by count, which a forward could shift by launching more,
    smaller pieces in some calls and none in another (GRAPH_COPY.md); its launches at capture
    show it."""
    if len(captured) < 2:
        return {}
    first = captured[0]
    for call, found in enumerate(captured):
        if found != first:
            return {"even_launches_off": {"call": call, "found": list(found),
                                          "first": list(first)}}
    return {}


def _other_kernels(runs: list | None, checked: list | None) -> dict:
    """``{"even_kernels_off": {call, found, wanted}}`` for the first run of ``runs`` (each a
    sorted list of kernel names: one captured call's, ``Witness.span_run_names``) whose names
    are not the ``checked`` call's (its ``[name, us, owner]`` kernels); ``{}`` when every run's
    are, or either is unknown. The replay's kernels are split into calls by count: a forward
    whose captured calls launch different kernels (pieces of the work in some, none in others)
    would move the split's boundaries off its calls'."""
    if not runs or checked is None:
        return {}
    wanted = sorted(str(k[0])[:200] for k in checked if isinstance(k, (list, tuple)) and k)
    for call, found in enumerate(runs):
        if found != wanted:
            return {"even_kernels_off": {"call": call, "found": found[:8],
                                         "wanted": wanted[:8]}}
    return {}


class _Run:
    """One candidate model on one device, every forward call observed the same way.

    Every call, checked or timed, goes through ``invoke``: the call's inputs live in the same
    persistent buffers (copied in when they change), the buffers' version counters are reset,
    the RNG is seeded from the call's trial, and the op trace and the witness range are active.
    Nothing the candidate can read (pointers, versions, RNG state, dispatch-key state, the
    profiler flag) tells a checked call from a timed one. Some timed calls, picked by a secret
    (``timed_check_seed``), get another trial's inputs and their output is sent to the parent."""

    def __init__(self, model, device: str, base_threads: set, base_tasks: set,
                 max_bytes: int | None = None, *, trials: list | None = None,
                 witness: Witness | None = None, check_seed: int | None = None,
                 hidden: int = 0, init_seed: int = 0):
        self.model, self.device, self.max_bytes = model, device, max_bytes
        self.forward_seed = forward_seed(init_seed)
        self.first_call = True
        self.base_threads, self.base_tasks = base_threads, base_tasks
        self.trials = trials or []
        self.witness = witness or Witness()
        self.buffers = to_device(self.trials[0]["inputs"], device) if self.trials else []
        # the timed calls' inputs at several places in memory, in turn (``M.placed_copies``);
        # every load fills them all, so any call sees the same inputs wherever they sit
        self.placements = M.placed_copies(self.buffers, device)
        self.timed_calls = 0
        self.captured: list[tuple[int, int]] = []  # (launches, extension calls) per captured call
        self.timed_checks: list[dict] = []
        self.changed_while_timed: list[str] = []  # ``check_timed_inputs``
        self.ghost_ranges: set[int] = set()  # the witness ranges of the ghost calls
        self.last_shapes: list[tuple] = []
        self._secret = random.Random(check_seed) if check_seed is not None else None
        self.hidden = hidden  # unseen-input trials, each asked of the parent at its call
        self.unseen_facts: dict | None = None
        self._shipped: dict[tuple, list] = {}  # host copies of outputs, by dtype, shape, strides
        self._previous = None  # the last call's output (``invoke``)
        self._held: list = []  # references that level its count (``_held_alike``)

    def check_timed_inputs(self) -> None:
        """After each round and loop of the timing window: the inputs at every placement must
        still be trial 0's as sent. Scored calls are the only ones no load precedes, so a mark
        a forward writes into its own inputs survives only between them, and tells them apart
        (red-team round 23 halved its work where its mark was still there, and stopped marking
        before the check after timing). Any such write is seen here."""
        if self.changed_while_timed or not self.trials:
            return
        for place, buffers in enumerate(self.placements):
            for index, (value, sent) in enumerate(zip(buffers, self.trials[0]["inputs"])):
                if _type(value) is _Tensor and _unchanged_fact(value, sent).get("same") is False:
                    self.changed_while_timed.append(f"input {index} (placement {place}) changed "
                                                    "between timed calls")
                    return

    def sometimes_check_timed_inputs(self) -> None:
        """Between two scored calls, after a secret share of them (``SAMPLE_CHECK_SHARE``):
        ``check_timed_inputs``. A mark set and cleared within a round is gone by its end, and
        the calls of a round can be counted (red-team round 24 marked its inputs after a
        round's first call and cleared them in its last); it is there after some call, and
        which calls are looked after is not known to the forward. Outside the sample's time."""
        if self._secret is not None and self._secret.random() < SAMPLE_CHECK_SHARE:
            self.check_timed_inputs()

    def load(self, values: list) -> None:
        """Put a trial's inputs into the persistent buffers (same storage, same pointers), at
        every placement."""
        for buffers in self.placements:
            self._load_into(buffers, values)

    def _load_into(self, buffers: list, values: list) -> None:
        for index, value in enumerate(values):
            buffer = buffers[index] if index < len(buffers) else None
            if _type(value) is not _Tensor:
                buffers[index] = value
            elif _type(buffer) is _Tensor and buffer.shape == value.shape and \
                    buffer.dtype == value.dtype:
                _tensor_copy(buffer, value)
            else:
                buffers[index] = to_device([value], self.device)[0]

    def _next_placement(self) -> None:
        """The next timed call's inputs: the next placement's buffers."""
        if len(self.placements) > 1:
            self.buffers = self.placements[self.timed_calls % len(self.placements)]

    def invoke(self, capturing: bool | None = None):
        """One candidate forward on the buffers, instrumented identically for every call
        (``capturing``: whether a CUDA graph capture is on, when the caller asked already).
        Every call starts from the same RNG state (``forward_seed``: the grade's, not the
        trial's, which named the inputs: red-team round 28 keyed an answer cache by
        ``torch.initial_seed()``), and every placement's inputs from version 1 (the copies not
        in use would otherwise tell a call that a load came before it)."""
        tensors = tuple(b for buffers in self.placements for b in buffers if _type(b) is _Tensor)
        if tensors:
            _set_versions(tensors, (1,) * len(tensors))
        if capturing is None:
            capturing = _capturing(self.device)
        if not capturing:
            _manual_seed(self.forward_seed)
        # Gradients off by the C calls bound at import, around the ranges: ``torch.no_grad``'s
        # exit looks ``torch.set_grad_enabled`` up, after the ranges closed (red-team round 8
        # rebound it for one call, to a function that computed the answer there and put itself
        # back). The witness's range is the outermost and is opened and closed by direct calls:
        # every piece of Python on the way in and out (the op trace's mode, its context
        # manager, a name looked up in torch or the standard library, which a submission can
        # make run its own code) runs inside it, where its ops are the call's (red-team rounds
        # 10-11 ran PyTorch from a ``contextlib`` exit after the range had closed).
        self._held = []  # the last call's levelling released first: it is counted anew
        self._held = _held_alike(self._previous)
        watched = _spans([b for b in self.buffers if _type(b) is _Tensor and
                          b.is_floating_point() and b.numel() > 1])
        grad = _is_grad_enabled()
        _set_grad_enabled(False)
        _audit_event("kernelmill.call", 1, "")
        opened = self.witness.open_call()
        try:
            tracer = _OpTrace(watched)
            with tracer:
                _audit_event("kernelmill.call", 0, dispatch_state())
                out = _at_depth(CALL_DEPTH - _stack_depth(), self.model, self.buffers)
                _check_dispatch_state()
        finally:
            self.witness.close_call(opened)
            _audit_event("kernelmill.call", -1, "")
            _set_grad_enabled(grad)
        # Held until the next call has returned, whatever kind of call this was: a forward that
        # learned from its last output's finalizer whether the timer still held it was fast only
        # in scored calls (red-team round 17). (Released here, after the range: a finalizer's
        # ops are outside every call.)
        self._previous = out
        return out, tracer

    def timed(self):
        """A timed call (``validate.measure`` calls this as its ``fn``), on the next
        placement's buffers."""
        self.timed_calls += 1
        self._next_placement()
        check = None
        if self._secret is not None and len(self.trials) > 1 and \
                self._secret.random() * self.timed_calls < 1.0 and not _capturing(self.device):
            check = self._secret.randrange(1, len(self.trials))  # a reservoir of one call
        if check is None:
            capturing = _capturing(self.device)
            if not capturing:
                return self.invoke(False)[0]
            before = _observed()
            out = self.invoke(True)[0]
            after = _observed()
            # each captured call's Triton launches and extension calls: the timing graph's
            # calls are the last ``calls_per_sample`` captured (``_even_calls_us``)
            self.captured.append((after["launches"] - before["launches"],
                                  after["ext_calls"] - before["ext_calls"]))
            del self.captured[:-CAPTURED_KEPT]
            return out
        self.load(self.trials[check]["inputs"])
        out, _ = self.invoke()
        sync(self.device)
        self.timed_checks = [{"trial": check, "call": self.timed_calls,
                              **self.observe(out, self.buffers, inputs_after=False)}]
        self.load(self.trials[0]["inputs"])
        return out

    def unseen(self, timer: M.Timer) -> int:
        """Inside the timing window: calls timed alike, first ``SEEN_FIRST`` on trial 0's
        inputs (seen in every timed call; each such call follows an untimed one on the same
        inputs), then each hidden trial's (never seen before), each followed by one on trial 0's
        again ("after"), all loaded into the same buffers. A forward that
        remembers inputs it has seen (an answer cache keyed by their content, on the host or on
        the device) is fast only on the first kind; a hidden trial's output is also sent to the
        parent to compare with the reference's.

        With a captured graph each timed call is a replay of the timing graph itself (a graph
        captured for this check alone could be told apart from it, and behave); its first
        call is the one on the inputs just loaded. Otherwise each is one forward (``Timer.once``).
        Each is also a witness ``span``: on CUDA its first call's kernels, by the device's own
        clock (CUPTI), free of the launch's and the synchronize's fixed cost, which hide a cache
        that saves a few µs. The witness, paused for graph replays, runs meanwhile."""
        if not self.hidden:
            return 0
        seen_ms, unseen_ms, checks, order = [], [], [], []
        first = self._on_device(self.trials[0])
        whole = timer.graph is not None
        calls = timer.calls_per_sample if whole else 1
        paused = not self.witness.running
        if paused:
            self.witness.resume()

        def timed_on(trial: dict, kind: str | None = None, flush: bool = True):
            self.load(trial["inputs"])
            if kind is not None:
                order.append(kind)
            timer.last_cpu_ms = None
            ms, out = timer.once(lambda: self.invoke()[0],
                                 self.witness.span if kind is not None else None, whole, flush)
            if kind is not None and timer.last_cpu_ms is not None:  # on CPU
                cpu_ms[kind].append(timer.last_cpu_ms / calls)
            return ms / calls, out

        def repeated(kind: str) -> float:  # on the inputs of the call before, as when timed
            timed_on(first)
            return timed_on(first, kind)[0]

        after_ms: list[float] = []
        cpu_ms: dict[str, list[float]] = {"seen": [], "unseen": [], "after": []}
        # The check is the window's last command (``window._timed_rounds``): the witness, once
        # resumed, stays on, so ending its session (CUPTI's teardown) is not exclusive GPU time.
        done = False
        try:
            # The baseline comes before any unseen input: a forward that changes its ways once
            # it has seen one (a cache that turns honest) cannot raise it. Calls on the timed
            # inputs after each unseen one show such a change.
            for _ in range(SEEN_FIRST):
                seen_ms.append(repeated("seen"))
            if whole and calls > 1:
                # one replay right after another on the same inputs, unflushed, as the scored
                # ones run: its calls' kernels, each call's apart (``_unseen_device_us``)
                timed_on(first, "even", flush=False)
            for index in range(self.hidden):
                # asked for now: it was nowhere in this process before (``late_payload``)
                trial = late_payload(index)
                if trial is None:
                    break
                ms, out = timed_on(trial, "unseen")
                unseen_ms.append(ms)
                checks.append({"hidden": index, **self.observe(out, self.buffers,
                                                               inputs_after=False, ship=False)})
                after_ms.append(repeated("after"))
            done = True
        finally:
            if paused and not done:
                self.witness.pause()
        self.unseen_facts = {"seen_ms": seen_ms, "unseen_ms": unseen_ms, "after_ms": after_ms,
                             "checks": checks, "method": timer.method, "order": order,
                             "calls": calls}
        if cpu_ms["unseen"]:
            self.unseen_facts.update({f"{k}_cpu_ms": v for k, v in cpu_ms.items()})
        return len(unseen_ms)

    def _on_device(self, trial: dict) -> dict:
        """``trial`` with its input tensors copied to the device once, when they are small
        enough (``PRISTINE_BYTES``): the unseen check loads them ten times, inside the window,
        and a load from the host moved 128 MB over PCIe each time."""
        tensors = [v for v in trial["inputs"] if _type(v) is _Tensor]
        size = sum(v.numel() * v.element_size() for v in tensors)
        if not self.device.startswith("cuda") or not tensors or size > PRISTINE_BYTES:
            return trial
        return {**trial, "inputs": to_device(trial["inputs"], self.device)}

    def call(self, trial_index: int) -> dict:
        """A checked call on trial ``trial_index``: raw facts for the parent."""
        trial = self.trials[trial_index]
        self.load(trial["inputs"])
        inputs = self.buffers
        before = _observed()
        modes_before = active_modes()
        record: dict[str, Any] = {"range": self.witness.calls}
        out, tracer = self.invoke()
        sync(self.device)
        after = _observed()
        for name in ("launches", "ext_calls", "thread_starts", "dispatch_state", "host_access",
                     "foreign_memory"):
            record[name] = after[name] - before[name]
        record["modes"] = max(modes_before, active_modes())
        record["ops"] = tracer.ops
        record["input_reads"] = tracer.input_reads
        record["flops"], record["thin_gemms"] = tracer.flops, tracer.thin_gemms[:8]
        items = list(out) if _type(out) in (tuple, list) else [out]
        produced = _spans([t for t in items if _type(t) is _Tensor])
        overlaps = lambda spans: any(lo < b and a < hi for lo, hi in produced  # noqa: E731
                                     for a, b in spans)
        # The answer was copied into place by PyTorch and no custom kernel touched it.
        record["output_by_copy"] = overlaps(tracer.copy_spans) and not overlaps(after.get("kernel_args", ()))
        record["threads"] = sorted(t.name for t in _enumerate_threads()
                                   if t.ident not in self.base_threads and t.is_alive())
        tasks = _tasks()
        if self.first_call:
            # Runtimes start some OS threads lazily on first use (CUDA module loading, OpenMP at
            # a new size): report those, then judge only threads that appear in later calls.
            record["native_threads_first_call"] = sorted(_task_name(t)
                                                         for t in tasks - self.base_tasks)
            self.base_tasks = self.base_tasks | tasks
            self.first_call = False
            record["native_threads"] = []
        else:
            record["native_threads"] = sorted(_task_name(t) for t in tasks - self.base_tasks)
        record.update(self.observe(out, inputs, sent=trial["inputs"]))
        return record

    def ghost(self, trial_index: int) -> dict:
        """Forward once more on a trial's inputs with the candidate's Triton launches skipped.
        The memory the allocator hands out next is first filled with NaN (``GHOST_POISON``
        blocks of each last output's size, freed just before: forward's own intermediates of
        that size take some of them, and every cached block that still holds an earlier answer
        is taken and overwritten), so a skipped kernel leaves garbage behind. If the answer is
        still right, the kernels did not compute it."""
        trial = self.trials[trial_index]
        previous = self._previous
        poisoned = _poison_outputs(previous)
        self.load(trial["inputs"])
        poison = [_full(shape, float("nan") if dtype.is_floating_point else -1,
                             dtype=dtype, device=self.device)
                  for shape, dtype in self.last_shapes for _ in range(GHOST_POISON)]
        del poison
        before = _observed()
        _audit_event("kernelmill.ghost", 1)
        try:
            self.ghost_ranges.add(self.witness.calls)
            out, _ = self.invoke()
            sync(self.device)
        finally:
            _audit_event("kernelmill.ghost", -1)
        after = _observed()
        earlier = M._spans(previous) if previous is not None else []
        reused = any(lo < b and a < hi for lo, hi in M._spans(out) for a, b in earlier)
        return {"trial": trial_index, "skipped": after["ghosted"] - before["ghosted"],
                "ext_calls": after["ext_calls"] - before["ext_calls"],
                # the answer sits where the call before left its own (a kept output buffer)
                "reuses_previous": reused,
                # and that memory was filled with NaN first: a kept buffer holds no answer
                "previous_poisoned": poisoned,
                **self.observe(out, self.buffers, inputs_after=False)}

    def witnessed(self, facts: dict) -> None:
        """After the last call: put the witness's op lists into the call records."""
        self.witness.stop()
        per_call = self.witness.per_call()
        checked = {call["range"] for call in facts["calls"]} | self.ghost_ranges
        if per_call is not None:
            for call in facts["calls"]:
                if call["range"] < len(per_call):
                    entry = per_call[call["range"]]
                    call["traced_ops"] = call["ops"]
                    for key in ("ops", "op_roots", "launch_ops", "top_op_us", "launch_us",
                                "kernels", "busy_us"):
                        call[key] = entry[key]
            timed = {(op, root) for index, entry in enumerate(per_call) if index not in checked
                     for op, root in [*zip(entry["ops"], entry["op_roots"]),
                                      *((op, op) for op in entry["launch_ops"])]}
            facts["timed_ops"] = sorted([op, root] for op, root in timed)
            facts["timed_candidate_ops"] = self.witness.candidate_ops([op for op, _ in timed])
            kernels: dict[str, float] = {}
            for index, entry in enumerate(per_call):
                if index not in checked:
                    for _name, us, owner in entry["kernels"]:
                        kernels[owner] = kernels.get(owner, 0.0) + us
            facts["timed_kernel_us"] = kernels  # by owner: triton, extension, or an op name
            facts["stray_ops"] = dict(self.witness.stray)
        for call in facts["calls"]:
            call["candidate_ops"] = self.witness.candidate_ops(
                [*call["ops"], *call.get("launch_ops", []), *call.get("traced_ops", [])])
        facts["python_ops"] = sorted({op_qualname(op) for call in facts["calls"]
                                      for op in call["candidate_ops"] if _python_only(op)})
        unseen = self.unseen_facts
        if unseen and self.device.startswith("cuda") and not self.witness.unavailable:
            self._unseen_device_us(unseen, facts["calls"])
        facts["witness"] = {"calls": self.witness.calls, "error": self.witness.error,
                            "unavailable": self.witness.unavailable}
        facts["timed_checks"] = self.timed_checks
        facts["timed_check_calls"] = self.timed_calls

    def _unseen_device_us(self, unseen: dict, calls_facts: list | None = None) -> None:
        """The unseen check's device times (``seen_device_us``, ``unseen_device_us``), or why
        they could not be read (``device_unread``): the judge does not pass a check it could
        not make."""
        calls = unseen.get("calls", 1)
        spans = self.witness.span_us(calls)
        counts = getattr(self.witness, "span_counts", None)
        if spans is None:
            unseen["device_unread"] = "no kernel records"
        elif len(spans) != len(unseen["order"]):
            unseen["device_unread"] = f"{len(spans)} timed ranges for {len(unseen['order'])} calls"
        elif not all(counts):
            unseen["device_unread"] = f"no kernel in a timed range (kernels per range {counts})"
        elif None in spans:
            unseen["device_unread"] = (f"kernels per range {counts} do not split into {calls} "
                                       "calls each")
        else:
            for kind in ("seen", "unseen", "after"):
                unseen[f"{kind}_device_us"] = [us for k, us in zip(unseen["order"], spans)
                                               if k == kind]
        calls_facts = calls_facts or []
        repeat = [c for c in calls_facts if c.get("kind") == "repeat"] or calls_facts[-1:]
        self._even_calls_us(unseen, calls, repeat[0].get("kernels") if repeat else None)

    def _even_calls_us(self, unseen: dict, calls: int, checked: list | None = None) -> None:
        """The hot replay of the timing graph (``unseen``'s "even" call): the busy time of each
        captured call's kernels (``even_calls_us``), and µs in which one call's kernels ran
        beside another's (``even_overlap_us``); else why not (``even_unread``). With
        ``checked`` (a checked call's ``[name, us, owner]`` kernels): the first call of the
        replay whose kernels are not those by name (``even_kernels_off``)."""
        if "even" not in unseen["order"]:
            return
        index = unseen["order"].index("even")
        per_call = self.witness.span_calls_us(calls)
        counts = getattr(self.witness, "span_counts", None) or []
        if per_call is None or len(per_call) != len(unseen["order"]):
            unseen["even_unread"] = "no kernel records for each timed range"
        elif per_call[index] is None:
            unseen["even_unread"] = (f"{counts[index]} kernels in one replay do not split into "
                                     f"{calls} calls")
        else:
            unseen["even_calls_us"] = per_call[index]
            unseen["even_overlap_us"] = self.witness.span_overlap_us[index]
            runs = (getattr(self.witness, "span_run_names", None) or [None] * (index + 1))[index]
            unseen.update(_other_kernels(runs, checked))
        unseen.update(_uneven_launches(getattr(self, "captured", [])))

    def ship(self, tensor: torch.Tensor) -> torch.Tensor:
        """The host copy of an output, for the parent. One bit for bit like an output already
        shipped is that same tensor object, and ``torch.save`` writes a shared storage once: a
        deterministic forward's repeat, refill, audit and timed calls on one trial cross the
        pipe once (a 4096² fp16 matmul: 32 MB each). Found by comparing the bytes with those
        shipped of its dtype, shape and strides (one per trial, mostly)."""
        host = to_cpu(tensor)
        shipped = self._shipped.setdefault((str(host.dtype), tuple(host.shape), host.stride()),
                                           [])
        for earlier in shipped:
            if M.same_bits(earlier, host):
                return earlier
        shipped.append(host)
        return host

    def observe(self, out, inputs: list, inputs_after: bool = True, ship: bool = True,
                sent: list | None = None) -> dict:
        """The call's outputs as the parent judges them (copied to the host), and, where the
        parent checks them (checked and timed calls), the inputs as forward left them. Without
        ``ship`` the host copies are sent as they are (no digest to find a copy shipped
        already: an unseen input's output is like no other, and inside a timing window a
        SHA-256 of 64 MB costs 40 ms or more)."""
        if _type(out) in (tuple, list):
            structure, items = f"{_type(out).__name__}:{len(out)}", list(out)
        else:
            structure, items = ("tensor" if _isinstance(out, torch.Tensor)
                                else _type(out).__name__), [out]
        facts: dict[str, Any] = {"structure": structure, "types": [], "outputs": None,
                                 "subclass": False}
        outputs, alias = [], False
        input_spans = _spans(inputs)
        for item in items:
            kind = _type(item)
            facts["types"].append(f"{kind.__module__}.{kind.__qualname__}")
            if kind is not _Tensor:
                facts["subclass"] = _isinstance(item, torch.Tensor)
                outputs = None
                break  # never touch a subclass or foreign object: its methods are candidate code
            if self.max_bytes and item.numel() * item.element_size() > self.max_bytes:
                facts["oversized"] = True
                outputs = None
                break  # not worth shipping: it cannot be the right answer
            for low, high in _spans([item]):
                alias = alias or any(low < b and a < high for a, b in input_spans)
            facts["foreign"] = facts.get("foreign", False) or _foreign(item)
            outputs.append(item)
        else:
            facts["devices"] = [t.device.type for t in outputs]
            facts["outputs"] = [self.ship(t) if ship else to_cpu(t) for t in outputs]
            self.last_shapes = [(tuple(t.shape), t.dtype) for t in outputs]
        facts["alias"] = alias
        if inputs_after:  # the parent checks only that they are unchanged
            facts["inputs_after"] = [_unchanged_fact(v, s) for v, s in
                                     zip(inputs, sent if sent is not None else [None] * len(inputs))]
        return facts


def _unchanged_fact(value, sent) -> Any:
    """What the parent checks of an input after forward: for a tensor, whether its bytes are
    still those the parent sent (``sent``: the trial's host tensor; without it, a SHA-256 the
    parent computes too), else the value itself."""
    if _type(value) is not _Tensor:
        return value
    host = to_cpu(value)
    if _type(sent) is _Tensor:
        if sent.device.type != "cpu":
            sent = to_cpu(sent)
        return {"same": M.same_bits(host, sent), "dtype": str(host.dtype),
                "shape": list(host.shape)}
    return M.tensor_digest(host)


SAMPLE_CHECK_SHARE = 0.25  # scored calls after which the inputs are compared (one per sample)
CAPTURED_KEPT = 4096  # captured calls' launch counts kept (``_Run.captured``; graphs <= 1024)
SEEN_FIRST = 3  # calls on the timed inputs that open the unseen check: its baseline
PRISTINE_BYTES = 256 << 20  # the timed inputs kept on the device for the unseen check, up to


def _poison_outputs(output) -> bool:
    """Fill the memory behind each tensor of the call before's result with all-one bytes (NaN
    in every floating-point type, -1 in the integer ones), in place, before a ghost call: an
    answer kept there (an output buffer the forward returns again, or a cache that hands back
    the tensor it gave last) is gone, so a right answer with the launches skipped was computed
    by something other than the kernels. Whether every such tensor was filled."""
    if output is None:
        return False
    _kind, items = flatten_outputs(output)
    tensors = [item for item in items if _type(item) is _Tensor]
    try:
        with _no_grad():
            for tensor in tensors:
                flat = _tensor_set(_empty(0, dtype=torch.uint8, device=tensor.device),
                                   _tensor_storage(tensor))
                _tensor_fill(flat, 255)
    except Exception:  # noqa: BLE001 — a tensor without plain storage: not poisoned
        return False
    return bool(tensors)


GHOST_POISON = 4  # poisoned blocks per output before the ghost call (one was not enough on
# CPU: a conv + Triton ReLU's conv output took it, and its output got a block holding the answer)


def _capturing(device: str) -> bool:
    """Inside a CUDA graph capture (the RNG cannot be reseeded there)."""
    return device.startswith("cuda") and bool(_is_capturing())


def _baseline(device: str) -> None:
    """Start the runtime's own threads (OpenMP pool, CUDA) before the snapshot."""
    a = torch.randn(256, 256, device=device)
    (a @ a).sum().item()
    torch.softmax(a, dim=-1).max().item()
    sync(device)


def _private_namespace() -> dict:
    """Private copies of this module and of the two it runs beside a submission
    (``validate.measure``: the timer; ``grade.witness``: the profiler ranges), each function and
    class defined there rebuilt over its copy (``contextmanager``s, static methods, properties
    and ``super()`` cells too), every list, dict and set copied, and each reference between them
    to the copy; returns this module's. A submission reaches the modules (``sys.modules``) and
    may rebind their names, add members to their classes or fill their containers for as long
    as it likes: none of it is what the harness then calls (red-team rounds 8-10 rebound
    ``_set_grad_enabled`` and the witness's ``_range_exit`` for one call, to run PyTorch after
    the observed ranges closed, and gave the ``Timer`` class properties that slowed its clock
    for one read). Made before the candidate's import; frames, ``__globals__`` and the
    collector, which would reach the copies, are refused by the audit hook."""
    modules = [sys.modules[__name__], M, sys.modules[Witness.__module__]]
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
                copy = function(member, tuple(cells))
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
            result = function(value)
        elif kind is types.FunctionType and value.__code__ is helper and \
                ours(getattr(value, "__wrapped__", None)):
            result = contextlib.contextmanager(convert(value.__wrapped__))
        elif kind in (staticmethod, classmethod) and ours(value.__func__):
            result = kind(convert(value.__func__))
        elif kind is property and any(ours(f) for f in (value.fget, value.fset, value.fdel)):
            result = property(*(f if f is None else convert(f)
                                 for f in (value.fget, value.fset, value.fdel)), value.__doc__)
        elif _isinstance(value, type) and defined_here(value):
            return rebuilt_class(value)
        elif kind in (list, dict, set):
            result = kind(value)
        memo[id(value)] = result
        return result

    for module in modules:
        space = vars(copies[module.__name__])
        for name, value in vars(module).items():
            space[name] = convert(value)
    return vars(copies[__name__])


def candidate_task(payload: dict) -> dict:
    """The candidate's worker run (``_candidate_task``), on a private copy of this module."""
    return _private_namespace()["_candidate_task"](payload)


def _candidate_task(payload: dict) -> dict:
    device = payload["device"]
    source = payload["source"]
    _few_host_threads(device)
    if payload.get("window") and not M.await_gpu(receive, report):
        payload = {**payload, "time": False}  # the window was called off: check, do not time
    mark_stage("setup")
    if device.startswith("cuda"):
        torch.cuda.init()
    _baseline(device)
    # before the import: every op registered later is the candidate's
    witness = Witness(device if payload.get("device_witness", True) else "cpu")
    _install_triton_hook()
    # Every candidate's loaders are wrapped, whether or not its text names them (a name
    # computed at run time reaches the same functions, and on a GPU a build at import may run a
    # compiler): where the compile worker built nothing, nothing loads.
    named = "cpp_extension" in source or "load_inline" in source
    _install_extension_hooks(allowed_digests=payload.get("extension_digests") if named else [])
    _install_thread_hooks()
    _install_host_access_hooks()
    confine = payload.get("confine", False)
    if confine:
        # No process creation from here on; on CUDA only after the first call, whose Triton
        # JIT runs ptxas and a C compiler (a downgrade the verdict records).
        sandbox.isolate_network()
        sandbox.forbid_other_processes()
        if not device.startswith("cuda"):
            sandbox.forbid_process_creation()
        else:
            sandbox.STATE["process_creation"] = "allowed until the first call (CUDA JIT)"
    base_threads = {t.ident for t in _enumerate_threads()}
    base_tasks = _tasks()
    facts: dict[str, Any] = {"calls": []}

    # after our own hooks: what changes from here on is the candidate's (kept here, with the
    # checker, out of the candidate's reach: it may reach this module's globals)
    snapshot, check_patched = snapshot_modules(), patched_functions
    # kernelmill's own functions and the builtins, checked again at every timing report: a
    # patch made for the window and undone before the end (the timer's clocks slowed, the
    # encoder wrapped; red-team round 6) is live when the window's answers are sent
    own = (tuple(e for e in snapshot[0] if _owned_by_us(e[0])), (),
           tuple(m for m in snapshot[2] if _owned_by_us(m[0])))
    seen_patches: list[str] = []

    def checked_report(value: dict) -> None:
        seen_patches.extend(check_patched(own))
        report(value)

    _bind_cuda_generators()
    refuse_runtime_code()
    require_trusted_senders()
    mark_stage("import")
    ns = load_namespace(source, "candidate")
    if "ModelNew" not in ns:
        raise NameError("candidate defines no ModelNew")
    mark_stage("init")
    _manual_seed(payload["init_seed"])
    model = ns["ModelNew"](*payload["init_inputs"])
    if _isinstance(model, torch.nn.Module):
        model = model.to(device)
        facts["weights"] = _load_weights(model, payload.get("state_dict") or {})
    trials = payload["trials"]
    run = _Run(model, device, base_threads, base_tasks, payload.get("max_output_bytes"),
               trials=trials, witness=witness, check_seed=payload.get("timed_check_seed"),
               hidden=int(payload.get("hidden_trials") or 0), init_seed=payload["init_seed"])
    buffers = run.buffers
    facts["modes_after_import"] = active_modes()

    mark_stage("profiler start")
    witness.start()
    mark_stage("forward")
    for index in range(len(trials)):
        facts["calls"].append({"trial": index, "kind": "fresh", **run.call(index)})
        if index == 0 and confine and device.startswith("cuda"):
            if sandbox.forbid_process_creation() == "blocked":
                sandbox.STATE["process_creation"] = "blocked after the first call"
    refill = payload.get("refill_from")
    if refill is not None:
        mark_stage("forward refill")
        facts["calls"].append({"trial": refill, "kind": "refill", **run.call(refill)})
    mark_stage("forward repeat")
    facts["calls"].append({"trial": 0, "kind": "repeat", **run.call(0)})
    facts["children"] = len(_live_children())

    if payload.get("time", True):
        mark_stage("timing")
        before = _observed()
        calls = [0]

        def forward():
            calls[0] += 1
            return run.timed()  # instrumented exactly like the checked calls

        timer, timing = _serve_timing(forward, device, payload, witness, run.unseen,
                                      send=checked_report, after_work=run.check_timed_inputs,
                                      after_sample=run.sometimes_check_timed_inputs)
        timing["calls"] = calls[0]
        run.check_timed_inputs()  # once more after the window, every placement (a graph's too)
        after = _observed()
        timing["launches"] = after["launches"] - before["launches"]
        timing["ext_calls"] = after["ext_calls"] - before["ext_calls"]
        facts["timing"] = timing
        facts["unseen"] = run.unseen_facts
        mark_stage("after timing")
        # What the timed work left in its output (the graph's, when captured) on trial 0. The
        # last timed call may have been a secret check on another trial's inputs: call again.
        out = timer.output
        while timer.graph is None and run.timed_checks and \
                run.timed_checks[-1]["call"] == run.timed_calls:
            out = timer.replay()
        facts["timed"] = run.observe(out, buffers, sent=trials[0]["inputs"])
        facts["timed"]["changed_while_timed"] = list(run.changed_while_timed)
        check = payload.get("graph_check_trial")
        if timer.graph is not None and check is not None:
            # The graph, not Python, is what was timed: refill its inputs with another
            # trial's, replay it, and let the parent compare.
            mark_stage("graph check")
            run.load(trials[check]["inputs"])
            out = timer.replay()
            # every call's output, each in memory of its own: a call that did part of the work
            # and left the rest to the calls beside it differs from the last
            agree = M.calls_disagree(timer.outputs, tuple(payload.get("tolerance") or (0, 0)))
            facts["graph_check"] = {"trial": check, "calls_agree": agree,
                                    **run.observe(out, run.buffers, inputs_after=False)}
        facts["timed"]["threads"] = sorted(
            t.name for t in _enumerate_threads() if t.ident not in base_threads and t.is_alive())
        # An audit call, traced like the checked ones, after an unpredictable number of timed
        # calls: a submission that switches to PyTorch after N calls is caught here.
        mark_stage("audit")
        facts["calls"].append({"trial": 0, "kind": "audit", **run.call(0)})
        facts["children"] = max(facts["children"], len(_live_children()))
    mark_stage("ghost")
    # first on the inputs of the call before: a forward that serves the answer of the inputs it
    # saw last (keyed by their values, their address, or nothing) gives it with its launches
    # skipped too (red-team round 25); then on another trial's. The call before is one more on
    # the last trial, not on the timed inputs: hundreds of freed outputs hold the timed
    # inputs' answer, and on a CPU the allocator handed one to an honest forward's ``empty``
    # past the ghost's poison blocks (1-2 grades in 12 of an honest 128 KB output)
    last = len(trials) - 1
    run.load(trials[last]["inputs"])
    run.invoke(False)
    sync(device)
    facts["ghost_seen"] = run.ghost(last)
    facts["ghost"] = run.ghost(1 if last > 1 else 0)
    if payload.get("window"):
        report({"gpu_done": True})  # the rest is host work: the parent frees the GPU
    run.witnessed(facts)
    facts["patched"] = check_patched(snapshot)
    observed = _observed()
    facts["refused_compiles"] = observed["refused"]
    facts["host_alias"] = observed["host_alias"]
    facts["host_view"] = observed["host_view"]
    facts["threads_started"] = observed["threads_started"]
    facts["modes_at_end"] = active_modes()
    facts["profile_hooks"] = sys.getprofile() is not None or sys.gettrace() is not None
    facts["info"] = device_info(device)
    facts["confinement"] = sandbox.report()

    def guard() -> list[str]:
        """Checked again after this function returns, just before the facts are encoded
        (``harness_worker.RESULT_GUARD``): a function rebound since the import would see the
        facts (``torch.save`` looks up Python functions on torch's modules). With what the
        timing reports saw rebound."""
        patched = sorted(set(check_patched(snapshot)) | set(seen_patches))
        return [f"replaced since the candidate's import: {', '.join(patched[:8])}"] if \
            patched else []

    facts[RESULT_GUARD] = guard
    return facts


def compile_task(payload: dict) -> dict:
    """Import a candidate so its extensions build (on a CPU-only worker, into a shared folder),
    on a private copy of this module (``_private_namespace``)."""
    return _private_namespace()["_compile_task"](payload)


def _compile_task(payload: dict) -> dict:
    mark_stage("compile")
    started = _perf_counter()
    if payload.get("confine", True):
        sandbox.isolate_network()  # its code runs here too (static initializers, at import)
    _install_extension_hooks(prebuilt=False, stream=True)
    refuse_runtime_code()  # its facts (the texts, the digests) are trusted by the parent
    load_namespace(payload["source"], "candidate")
    return {"seconds": _perf_counter() - started, "native_texts": list(_BUILT["texts"]),
            "digests": list(_BUILT["digests"]), "refused_compiles": _observed()["refused"]}
