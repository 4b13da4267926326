"""The Python scan: a submission's AST (names, attributes, imports, calls, patterns).

The walk that finds what ``scan_rules`` refuses, and the helpers it reads names and paths
with; string literals that parse as Python are scanned as Python, the rest as native source
(``native_scan``). ``static.scan`` is the entry point.
"""

from __future__ import annotations

import ast
import copy
import re

from kernelmill.core.problem import PARSE_LOCK

from .native_scan import native_findings
from .scan_rules import (
    ALLOWED_IMPORTS,
    FORBIDDEN_ATTRIBUTES,
    FORBIDDEN_CALLS,
    FORBIDDEN_MODULE_ATTRIBUTES,
    FORBIDDEN_MODULES,
    INDIRECT_BUILTINS,
    OS_PROCESS,
    PRIVATE_DISPATCH,
)

# Dangerous modules that library modules re-export as attributes (torch.os, torch.sys, ...),
# and the standard library's resolvers by name, which other modules import and so re-export.
REACHABLE_MODULES = {"sys", "os", "ctypes", "subprocess", "gc", "inspect", "importlib",
                     "builtins", "threading", "_thread", "signal", "multiprocessing", "pickle",
                     "marshal", "shutil", "tempfile", "socket", "time", "weakref", "atexit",
                     "pkgutil", "pydoc", "runpy", "traceback", "string", "io", "webbrowser",
                     "zipimport", "copyreg", "platform", "types"}
# Names whose private (``_``) attributes are the library's internals (torch._inductor,
# torch._utils, torch._C._...): a kernel uses the public API.
LIBRARY_MODULE_ROOTS = ("torch", "triton")
# What a kernel uses of the triton package: the decorators and helpers, the language, Hopper's
# TMA descriptors, and the driver's device queries (the tutorials' SM count). The rest is
# Triton's machinery: its C module builder (``triton.runtime.build`` compiles and imports any C
# source as a CPython extension: a submission could build one that rewrites the worker's
# result encoder, T-01/T-02), its compiler, IR builder, cache and knobs, reached under any path
# (the language module holds ``knobs`` too).
TRITON_API = ("jit", "autotune", "heuristics", "Config", "cdiv", "next_power_of_2", "language",
              "constexpr", "OutOfResources", "__version__", "tools.experimental_descriptor",
              "tools.tensor_descriptor", "set_allocator", "testing")
TRITON_DEVICE_QUERIES = ("runtime.driver.active.get_active_torch_device",
                         "runtime.driver.active.get_current_device",
                         "runtime.driver.active.get_current_stream",
                         "runtime.driver.active.get_current_target",
                         "runtime.driver.active.utils.get_device_properties")
TRITON_MACHINERY = {"knobs", "compiler", "backends", "build", "ir", "libtriton", "runtime",
                    "driver", "cache"}


def _triton_path_allowed(parts: list[str]) -> bool:
    """``parts`` (after ``triton``) is on, or on the way to, a public path."""
    path = ".".join(parts)
    if any(path == q or q.startswith(path + ".") for q in TRITON_DEVICE_QUERIES):
        return True
    if any(part in TRITON_MACHINERY for part in parts):
        return False
    return not parts or any(path == p or path.startswith(p + ".") or p.startswith(path + ".")
                            for p in TRITON_API)


def _chain(node: ast.AST) -> tuple[str | None, list[str]]:
    """``a.b.c`` -> ("a", ["b", "c"]); anything else -> (None, [])."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.insert(0, node.attr)
        node = node.value
    return (node.id, parts) if isinstance(node, ast.Name) else (None, [])


def _bindings(tree: ast.AST):
    """(names bound, the expression they are bound from) for every binding a scan can follow:
    assignments, walrus, for and comprehension targets, ``with ... as``, default arguments."""
    names = lambda target: [n.id for n in ast.walk(target) if isinstance(n, ast.Name)]  # noqa: E731
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                yield names(target), node.value
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.NamedExpr)) and \
                node.value is not None:
            yield names(node.target), node.value
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            yield names(node.target), node.iter
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                if item.optional_vars is not None:
                    yield names(item.optional_vars), item.context_expr
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            args = node.args
            positional = [*args.posonlyargs, *args.args]
            for arg, default in zip(positional[len(positional) - len(args.defaults):],
                                    args.defaults):
                yield [arg.arg], default
            for arg, default in zip(args.kwonlyargs, args.kw_defaults):
                if default is not None:
                    yield [arg.arg], default


# torch.utils holds the extension builder a CUDA answer needs, and tools that exec strings
# (torch.utils.benchmark's Timer runs its ``stmt``, which a submission can assemble at run time)
TORCH_UTILS_API = {"cpp_extension"}


def _torch_utils_refused(parts: list[str]) -> str | None:
    for i, part in enumerate(parts[:-1]):
        if part == "utils" and parts[i + 1] not in TORCH_UTILS_API:
            return ".".join(parts[:i + 2])
    return None


# Module objects whose attributes a submission must not assign (monkeypatching).
LIBRARY_ROOTS = {"torch", "triton", "time", "os", "sys", "math", "numpy", "np", "tl", "F", "nn",
                 "random", "statistics", "functools", "operator"}


def _forbidden_name(name: str) -> bool:
    """A name that is flagged as an attribute is flagged when imported by name too."""
    return name in FORBIDDEN_ATTRIBUTES or bool(PRIVATE_DISPATCH.match(name)) or \
        name in REACHABLE_MODULES and name not in ("time",)


def _root_name(node: ast.AST) -> str | None:
    return _chain(node)[0]


_MODE = re.compile(r"^[rwaxbt+]{1,4}$")
# Calls that open a file by any API (builtins.open, io.open, io.FileIO, Path.open, os.fdopen).
OPENERS = {"open", "FileIO", "fdopen"}


def _is_write_open(call: ast.Call) -> bool:
    """Any call named like an opener with a mode that writes (positional or ``mode=``), or
    whose mode is computed (a submission can write through a computed mode unseen, T-01)."""
    # open(path, mode), io.open / FileIO(path, mode), os.fdopen(fd, mode); Path(...).open(mode)
    method = isinstance(call.func, ast.Attribute) and call.func.attr == "open" and not (
        isinstance(call.func.value, ast.Name) and call.func.value.id in ("io", "builtins"))
    modes = [*call.args[0 if method else 1:2 if method else 3],
             *(k.value for k in call.keywords if k.arg == "mode")]
    return any(not isinstance(m, ast.Constant) or isinstance(m.value, str) and
               _MODE.match(m.value) and any(c in m.value for c in "wax+") for m in modes)


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _path_parts(text: str) -> list[str] | None:
    """The parts of a dotted name written as a string (``"torch._inductor"``,
    ``"os:environ"``, ``"0.__globals__[sys]"``), or None for any other string."""
    if not re.fullmatch(r"[\w.:\[\]]+", text) or not re.search(r"[.:\[]", text):
        return None
    return [part for part in re.split(r"[.:\[\]]+", text) if part]




# CPython 3.11 keeps ast.parse's recursion depth in state its threads share: two grading
# threads parsing at once failed one with "AST constructor recursion depth mismatch" (a CI run
# of the hostile suite). Parses in this process take turns.
_PARSE_LOCK = PARSE_LOCK  # the process's one parse lock (core.problem)


def _parse(text: str) -> ast.AST:
    with _PARSE_LOCK:
        return ast.parse(text)


def _code_in_string(text: str) -> list[str]:
    """Findings in a string that is itself Python (a string annotation that typing evaluates,
    source handed to an evaluator by another name); prose and C++ do not parse."""
    if len(text) > 4000 or not any(c in text for c in "(.[="):
        return []
    try:
        tree = _parse(text)
    except (SyntaxError, ValueError):
        return []
    return _scan_tree(tree)



# Builtin classes whose positional class pattern matches the subject itself (``case int(n)``),
# reading no attribute
SELF_MATCHING = {"bool", "bytearray", "bytes", "dict", "float", "frozenset", "int", "list", "set",
                 "str", "tuple"}
# What makes ``isinstance`` or a class pattern run code of the class's choosing
MATCH_HOOKS = ("__match_args__", "__instancecheck__", "__subclasscheck__")


def _pattern_findings(tree: ast.AST) -> list[tuple[ast.AST, str]]:
    """Class patterns are attribute reads by name: a positional one reads the names in the
    class's ``__match_args__``, a tuple a class may compute at run time, and with a metaclass's
    ``__instancecheck__`` any subject matches (either is a ``getattr`` by computed name,
    T-01). A positional class pattern (but on a builtin that matches itself), a class that
    defines a matching hook, a metaclass and a class built by ``type(name, bases, dict)`` are
    findings; keywords are judged as the reads they are (``_with_pattern_reads``)."""
    found = []
    for node in ast.walk(tree):
        name = getattr(node, "name", None) if isinstance(node, ast.FunctionDef) else \
            node.id if isinstance(node, ast.Name) else \
            node.value if isinstance(node, ast.Constant) else None
        if isinstance(node, ast.MatchClass) and node.patterns and not (
                isinstance(node.cls, ast.Name) and node.cls.id in SELF_MATCHING):
            found.append((node, "a positional class pattern (reads the attributes its "
                                "class's __match_args__ names)"))
        elif isinstance(node, ast.ClassDef) and any(k.arg == "metaclass" for k in node.keywords):
            found.append((node, f"class {node.name} has a metaclass"))
        elif isinstance(node, ast.ClassDef) and any(
                isinstance(b, ast.Name) and b.id == "type" for b in node.bases):
            found.append((node, f"class {node.name} is a metaclass"))
        elif isinstance(name, str) and name in MATCH_HOOKS:
            found.append((node, f"names {name}"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id == "type" and len(node.args) == 3:
            found.append((node, "builds a class at run time (type with three arguments)"))
    return found


def _with_pattern_reads(tree: ast.AST) -> ast.AST:
    """``tree`` with the attribute reads its class patterns make written out: ``match S:
    case C(name=p)`` reads ``S.name`` (a submission can read a forbidden module as
    ``case object(gc=g)``, a keyword no attribute rule sees, T-01). Each becomes an ``S.name``
    expression after the module's body, so every attribute rule judges it."""
    reads = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Match):
            continue
        for case in node.cases:
            for pattern in ast.walk(case.pattern):
                if isinstance(pattern, ast.MatchClass):
                    for name in pattern.kwd_attrs:
                        read = ast.copy_location(ast.Attribute(
                            value=copy.deepcopy(node.subject), attr=name, ctx=ast.Load()),
                            pattern)
                        read.pattern_read = True  # a module's attribute, as far as it may be
                        reads.append(ast.copy_location(ast.Expr(read), pattern))
    if not reads or not isinstance(tree, ast.Module):
        return tree
    return ast.Module(body=[*tree.body, *reads], type_ignores=[])


def _scan_tree(tree: ast.AST) -> list[str]:
    tree = _with_pattern_reads(tree)
    findings: list[str] = []
    imported_modules = set(LIBRARY_ROOTS)
    bound_by_import: set[str] = set()

    def flag(node: ast.AST, what: str) -> None:
        findings.append(f"line {getattr(node, 'lineno', '?')}: {what}")

    for node, what in _pattern_findings(tree):
        flag(node, what)

    # getattr(obj, "constant") is ordinary; getattr passed around (reduce(getattr, ...),
    # g = getattr) or called with a computed name is a way around this scan.
    direct_calls = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Name)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in INDIRECT_BUILTINS and \
                id(node) not in direct_calls:
            flag(node, f"passes {node.id} around")

    # Names bound to the libraries' modules (torch, nn, F, triton, tl ...): their private
    # attributes are internals.
    library_names = set(LIBRARY_MODULE_ROOTS)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in LIBRARY_MODULE_ROOTS:
                    library_names.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, ast.ImportFrom) and \
                (node.module or "").split(".")[0] in LIBRARY_MODULE_ROOTS:
            library_names.update(alias.asname or alias.name for alias in node.names)

    def imported(node: ast.AST, module: str, what: str) -> None:
        """One imported module path (``a.b.c``), named in a finding as ``what``."""
        parts = module.split(".")
        if parts[0] == "torch" and _torch_utils_refused(parts[1:]):
            flag(node, f"imports {what} (torch.utils beyond cpp_extension)")
        if parts[0] in FORBIDDEN_MODULES:
            flag(node, f"imports {what}")
        elif parts[0] not in ALLOWED_IMPORTS:
            flag(node, f"imports {what} (not a module a kernel needs)")
        if any(_forbidden_name(part) for part in parts[1:]) or \
                (parts[0] in LIBRARY_MODULE_ROOTS and any(map(_private, parts[1:]))):
            flag(node, f"imports {what}")

    # name bound by an import -> the module's dotted name (``import os as o``: o -> os)
    aliases = {alias.asname or alias.name.split(".")[0]:
               alias.name if alias.asname else alias.name.split(".")[0]
               for node in ast.walk(tree) if isinstance(node, ast.Import)
               for alias in node.names}

    # name -> its triton path (``import triton.language as tl``: tl -> [language]); every
    # attribute chain from one (aliases included), and every import, stays on Triton's API
    triton_paths: dict[str, list[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "triton":
                    triton_paths[alias.asname or "triton"] = parts[1:] if alias.asname else []
                    if not _triton_path_allowed(parts[1:]):
                        flag(node, f"imports {alias.name} (Triton's machinery, not its API)")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "triton":
            base = (node.module or "").split(".")[1:]
            for alias in node.names:
                triton_paths[alias.asname or alias.name] = [*base, alias.name]
                if not _triton_path_allowed([*base, alias.name]):
                    flag(node, f"imports {alias.name} from {node.module} (Triton's machinery, "
                         "not its API)")
    # Aliases: a name bound from a library name (``_t = torch``, ``_rt = triton.runtime``,
    # ``def f(m=torch)``, ``for m in [torch]``) is a library name too; one bound from anything
    # else that mentions one holds a library object (its private attributes are internals).
    bindings = list(_bindings(tree))
    torch_names = {"torch", *(name for name, module in aliases.items() if module == "torch")}
    growing = True
    while growing:
        growing = False
        for targets, value in bindings:
            if isinstance(value, ast.Name) and value.id in torch_names and \
                    not set(targets) <= torch_names:
                torch_names.update(targets)
                growing = True
            root, parts = _chain(value)
            if root in triton_paths:
                for name in targets:
                    if name not in triton_paths:
                        triton_paths[name] = [*triton_paths[root], *parts]
                        growing = True
            mentioned = {n.id for n in ast.walk(value) if isinstance(n, ast.Name)}
            if mentioned & (library_names | set(triton_paths)):
                fresh = set(targets) - library_names - {"self", "cls"}
                library_names.update(fresh)
                growing = growing or bool(fresh)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            root, chain = _chain(node)
            if root in triton_paths and not _triton_path_allowed([*triton_paths[root], *chain]):
                flag(node, f"uses {ast.unparse(node)} (Triton's machinery, not its API)")
            refused = _torch_utils_refused(chain) if root in torch_names else None
            if refused and len(chain) == refused.count(".") + 1:  # once per chain
                flag(node, f"uses {root}.{refused} (torch.utils beyond cpp_extension)")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id in ("getattr", "hasattr") and len(node.args) >= 2 and \
                isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
            # getattr(torch, "_C") is the attribute written as a string
            name = node.args[1].value
            if _private(name) and _root_name(node.args[0]) in library_names:
                flag(node, f"uses library internals .{name} (by getattr)")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr == "__getattr__" and node.args and \
                _root_name(node.func.value) in library_names:
            # torch.ops.aten.__getattr__("_x") is getattr by another name
            name = node.args[0].value if isinstance(node.args[0], ast.Constant) else None
            if not isinstance(name, str):
                flag(node, "a library's __getattr__ with a computed name")
            elif _private(name):
                flag(node, f"uses library internals .{name} (by __getattr__)")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                imported_modules.add((alias.asname or alias.name).split(".")[0])
                bound_by_import.add((alias.asname or alias.name).split(".")[0])
                # ``import a.b as c`` binds a.b just as ``from a import b`` does: every part
                # is judged, the last one as an imported name
                imported(node, alias.name, alias.name)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                flag(node, f"imports from a relative package {'.' * node.level}{module}")
            elif module:
                imported(node, module, f"from {module}")
            root = module.split(".")[0]
            for alias in node.names:
                if root == "torch" and _torch_utils_refused([*module.split(".")[1:], alias.name]):
                    flag(node, f"imports {alias.name} from {module} (torch.utils beyond "
                         "cpp_extension)")
                if _forbidden_name(alias.name) or alias.name in FORBIDDEN_CALLS or \
                        (root, alias.name) in FORBIDDEN_MODULE_ATTRIBUTES or \
                        (module.split(".")[-1], alias.name) in FORBIDDEN_MODULE_ATTRIBUTES or \
                        (root in LIBRARY_MODULE_ROOTS and _private(alias.name)) or \
                        (module == "os" and OS_PROCESS.match(alias.name)):
                    flag(node, f"imports {alias.name} from {module}")
                if module.startswith("torch.utils._python_dispatch"):
                    flag(node, f"imports {alias.name} from {module}")
        elif isinstance(node, ast.Attribute):
            base = node.value.id if isinstance(node.value, ast.Name) else \
                node.value.attr if isinstance(node.value, ast.Attribute) else None
            if node.attr in FORBIDDEN_ATTRIBUTES:
                flag(node, f"uses .{node.attr}")
            elif PRIVATE_DISPATCH.match(node.attr):
                flag(node, f"uses dispatch internals .{node.attr}")
            elif aliases.get(base, base) == "os" and OS_PROCESS.match(node.attr):
                flag(node, f"uses os.{node.attr} (processes)")
            elif (base, node.attr) in FORBIDDEN_MODULE_ATTRIBUTES or \
                    (aliases.get(base), node.attr) in FORBIDDEN_MODULE_ATTRIBUTES:
                # also reached through another module: torch.sys.modules, torch.os.environ
                flag(node, f"uses {base}.{node.attr}")
            elif base in REACHABLE_MODULES and base not in bound_by_import:
                flag(node, f"reaches module {base} through an attribute")
            elif node.attr in REACHABLE_MODULES and \
                    (node.attr != "time" or getattr(node, "pattern_read", False) or
                     _root_name(node) in library_names | imported_modules):
                # ``torch.sys``: a module held by another, then used under any name (``.time``
                # of an object is often its own, so it counts on a module or read by a class
                # pattern: there it is the clock module)
                flag(node, f"reaches module {node.attr} through an attribute")
            elif _private(node.attr) and _root_name(node) in library_names:
                flag(node, f"uses library internals .{node.attr}")
        elif isinstance(node, ast.Name) and node.id in ("__builtins__", "__loader__", "__spec__"):
            flag(node, f"uses {node.id}")
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in FORBIDDEN_CALLS:
                flag(node, f"calls {func.id}()")
            name = func.id if isinstance(func, ast.Name) else \
                func.attr if isinstance(func, ast.Attribute) else None
            if name in OPENERS and _is_write_open(node):
                flag(node, "opens a file for writing")
            if isinstance(func, ast.Name) and func.id == "getattr" and len(node.args) >= 2 and \
                    not isinstance(node.args[1], ast.Constant):
                flag(node, "getattr with a computed name")
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            for target in targets:
                for sub in ast.walk(target):
                    if isinstance(sub, ast.Attribute) and _root_name(sub) in imported_modules \
                            and _root_name(sub) not in ("self", "cls"):
                        flag(node, f"assigns {ast.unparse(sub)} (patches a library)")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            for finding in native_findings(node.value):
                flag(node, finding)
            text = node.value.strip()
            for inner in _code_in_string(text):
                flag(node, f"code in a string: {inner.split(': ', 1)[-1]}")
            parts = _path_parts(text) or []
            if any(_forbidden_name(part) or part in FORBIDDEN_MODULES or part == "kernelmill"
                   for part in parts) or (parts and parts[0] in LIBRARY_MODULE_ROOTS
                                          and any(map(_private, parts[1:]))):
                flag(node, f"names {text!r} in a string (a dotted path to resolve)")
            if text in FORBIDDEN_ATTRIBUTES or text in REACHABLE_MODULES or \
                    (text in FORBIDDEN_CALLS and text != "input") or "kernelmill" in text or \
                    PRIVATE_DISPATCH.match(text):
                flag(node, f"names {text!r} in a string (indirect access)")
    return sorted(set(findings), key=lambda f: (int(f.split()[1].rstrip(":"))
                                                if f.split()[1].rstrip(":").isdigit() else 0, f))
