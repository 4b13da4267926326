"""The audit hook (``refuse_runtime_code``), installed just before the candidate's import.

It refuses code compiled from a string at run time and, once armed, the events that hand out
the interpreter's own objects (frames, code objects, the collector, ``ctypes``, pickles beyond
tensors and containers), unless a trusted package's code raised them: whoever raised an event
is read from its code's file. It also keeps what the observers count (``_observe``): the hooks
report events (``kernelmill.*``), and the counts live only in the hook's own namespace.

Every function the installed hook runs (``_SEALED``) is a copy over a private copy of this
module's namespace (``_sealed_hook``), so the module-level names below (``_in_hook``, ``_armed``,
``_KINDS``, ``REFUSED_COMPILES``, the constants) are what a submission can reach and change, not
what the installed hook reads. Best effort: it runs inside the candidate's interpreter.
"""
from __future__ import annotations

import ast
import builtins
import os
import sys
import types
from typing import Any

from ..call import _Run
from ..observers.counts import _COUNTED, _observed
from ..observers.launches import _LAUNCH_CODES
from .originals import _isinstance, _type
from .private import _package_modules

# ---------------------------------------------------------------- code compiled at run time

# Who raised an audit event is read from the code's file (a submission can rename its module,
# not its code objects' files): the first frame outside the standard library. Packages whose
# own code may compile source and reach the interpreter's internals in a candidate's worker:
CODEGEN_PACKAGES = frozenset({"triton", "torch", "einops", "transformers", "kernelmill"})
# Standard-library code generators (generated methods): their text may not name the
# interpreter's reflective builtins or attributes (a field name holding ``__import__`` is
# pasted into a dataclass's generated ``__eq__``)
STDLIB_CODEGEN = frozenset({"dataclasses", "collections"})
# Annotation evaluators: what they compile must read as a type expression, whoever asked (torch's
# schema inference can be made to evaluate an annotation a submission assembled)
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
    # (in which it could compute after the call and rewrite the counts); a hook that raises
    # here is not added (CPython)
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
        # in ``UserList.__init__``; a helper's own read names the attribute
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
                # code run inside a launch (a pre-run hook computing in NumPy on those copies)
                # is
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
# (``_sealed_hook``). A submission can reach this module and set the hook's own flag
# (``_in_hook``), its cache of file kinds and its constants through it; the hook that is
# installed reads none of them, nor a builtin or a ``sys``/``os``/``ast`` function
# rebound after it was installed.
_SEALED = ("_audit", "_observe", "_internals_allowed", "_origin", "_frame_kind", "_file_kind",
           "_compile_allowed", "_names_compile", "_names_it", "_type_expression", "_reflective",
           "_refuse")


def _module_copy(module, **members) -> types.SimpleNamespace:
    return types.SimpleNamespace(**{**vars(module), **members})


def _readers_of(name: str) -> frozenset:
    """The code objects of the worker package's functions and methods (nested ones too) that call
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

    for module in _package_modules():
        here = module.__name__
        for value in list(vars(module).values()):
            members = vars(value).values() if _isinstance(value, type) and \
                value.__module__ == here else [value]
            for member in members:
                member = getattr(member, "__func__", member)  # static and class methods
                if _isinstance(member, property):
                    member = member.fget
                if _isinstance(member, types.FunctionType) and member.__module__ == here:
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
