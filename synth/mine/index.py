"""Every file of a source read with libcst into its top-level definitions and imports, and names
resolved across the package's files (``from .layers import Mlp`` followed through re-exports to
the module that defines ``Mlp``). Nothing is imported or executed.
"""
from __future__ import annotations

import re
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

import libcst as cst

from .environment import truth
from .sources import Source

# What a mined problem may import: torch and the standard library (and what torch requires)
ALLOWED_ROOTS = frozenset({"torch", "typing_extensions", "__future__"}) | frozenset(
    sys.stdlib_module_names)


@dataclass
class Definition:
    """A top-level class, function or assignment of one module."""

    module: str
    name: str
    node: cst.CSTNode  # ClassDef | FunctionDef | SimpleStatementLine
    kind: str          # "class" | "function" | "assign"
    line: int
    path: Path

    @property
    def key(self) -> str:
        return f"{self.module}.{self.name}"


@dataclass(frozen=True)
class External:
    """A name imported from outside the package (``torch.nn``, ``math.sqrt``, ``einops``)."""

    module: str
    attr: str | None  # None: the module itself

    @property
    def root(self) -> str:
        return self.module.split(".")[0]


@dataclass(frozen=True)
class ModuleRef:
    """A module of the package used as a name (``from timm import layers``)."""

    module: str


@dataclass
class ModuleIndex:
    name: str
    path: Path
    text: str = ""
    module: cst.Module | None = None
    defs: dict[str, Definition] = field(default_factory=dict)
    imports: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    stars: list[str] = field(default_factory=list)
    error: str | None = None


def _dotted(node: cst.BaseExpression | None) -> str:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        # ``f(x).to``: no dotted name (its call's names are read where it is visited)
        base = _dotted(node.value)
        return f"{base}.{node.attr.value}" if base else ""
    return ""


def _absolute(module: str, is_package: bool, level: int, target: str) -> str:
    if not level:
        return target
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[:len(base) - (level - 1)] if level > 1 else base
    return ".".join([*base, target] if target else base)


_DEF_LINE = re.compile(r"^(?:async\s+def|def|class)\s+(\w+)", re.MULTILINE)


class _Reader:
    """Collects one module's top-level definitions and imports (also inside top-level
    ``if``/``try`` blocks: ``try: from x import y / except ImportError: y = None``; the first
    binding wins)."""

    def __init__(self, index: ModuleIndex, is_package: bool, lines: dict | None = None):
        self.index = index
        self.is_package = is_package
        self.lines = lines if lines is not None else {
            m.group(1): index.text.count("\n", 0, m.start()) + 1
            for m in _DEF_LINE.finditer(index.text)}

    def _try(self, stmt: cst.Try) -> None:
        """``try: import optional / except ImportError: fallback``: the try body's bindings,
        unless it imports a third-party package a problem may not use; then the handlers'."""
        scratch = ModuleIndex(self.index.name, self.index.path, text="")
        _Reader(scratch, self.is_package, self.lines).body(stmt.body.body)
        top = self.index.name.split(".")[0]
        optional = any(target.split(".")[0] not in ALLOWED_ROOTS and target.split(".")[0] != top
                       for target, _ in scratch.imports.values())
        if not optional or not stmt.handlers:
            self.body(stmt.body.body)
        for handler in stmt.handlers:
            self.body(handler.body.body)

    def _if(self, stmt: cst.If) -> None:
        """Both branches' bindings (the first wins), or only the taken branch's when the test
        is a question about the environment (``environment.truth``: an optional package's
        availability, the torch version, an environment variable)."""
        taken = truth(stmt.test)
        if taken is not False:
            self.body(stmt.body.body)
        if taken is not True:
            if isinstance(stmt.orelse, cst.Else):
                self.body(stmt.orelse.body.body)
            elif isinstance(stmt.orelse, cst.If):
                self._if(stmt.orelse)

    def define(self, name: str, node: cst.CSTNode, kind: str) -> None:
        if name not in self.index.defs and name not in self.index.imports:
            self.index.defs[name] = Definition(self.index.name, name, node, kind,
                                               self.lines.get(name, 0), self.index.path)

    def body(self, statements) -> None:
        for stmt in statements:
            if isinstance(stmt, cst.ClassDef):
                self.define(stmt.name.value, stmt, "class")
            elif isinstance(stmt, cst.FunctionDef):
                self.define(stmt.name.value, stmt, "function")
            elif isinstance(stmt, cst.SimpleStatementLine):
                for small in stmt.body:
                    self.small(small, stmt)
            elif isinstance(stmt, cst.If):
                self._if(stmt)
            elif isinstance(stmt, cst.Try):
                self._try(stmt)

    def small(self, small: cst.BaseSmallStatement, line: cst.SimpleStatementLine) -> None:
        index = self.index
        if isinstance(small, cst.Import):
            for alias in small.names:
                full = _dotted(alias.name)
                if alias.asname is not None:
                    index.imports.setdefault(alias.asname.name.value, (full, None))
                else:
                    index.imports.setdefault(full.split(".")[0], (full.split(".")[0], None))
        elif isinstance(small, cst.ImportFrom):
            level = len(small.relative)
            target = _absolute(index.name, self.is_package, level, _dotted(small.module))
            if isinstance(small.names, cst.ImportStar):
                index.stars.append(target)
                return
            for alias in small.names:
                name = _dotted(alias.name)
                local = alias.asname.name.value if alias.asname is not None else name
                index.imports.setdefault(local, (target, name))
        elif isinstance(small, (cst.Assign, cst.AnnAssign)):
            targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) \
                else [small.target]
            if isinstance(small, cst.AnnAssign) and small.value is None:
                return
            for target in targets:
                if isinstance(target, cst.Name):
                    self.define(target.value, line, "assign")


_VALIDATE = cst.CSTNode.__post_init__
_PARSING = threading.Lock()


def _noop(self) -> None:
    return None


def parse_trusted(text: str) -> cst.Module:
    """``cst.parse_module`` without libcst's per-node validation: the parser only builds nodes
    from text it accepted, and validating each of them was half of the parse (libcst's own
    comment in ``CSTNode.__post_init__`` names the waste). Other threads' nodes built meanwhile
    go unvalidated too, which only skips their own consistency checks."""
    with _PARSING:
        cst.CSTNode.__post_init__ = _noop
        try:
            return cst.parse_module(text)
        finally:
            cst.CSTNode.__post_init__ = _VALIDATE


def read_module(name: str, path: Path) -> ModuleIndex:
    index = ModuleIndex(name=name, path=path)
    try:
        index.text = path.read_text(encoding="utf-8")
        index.module = parse_trusted(index.text)
    except (OSError, UnicodeDecodeError) as exc:
        index.error = f"cannot read: {exc}"
        return index
    except cst.ParserSyntaxError as exc:
        index.error = f"parse error at line {exc.raw_line}: {exc.message}"
        return index
    except RecursionError:
        index.error = "parse error: nesting too deep"
        return index
    _Reader(index, path.name == "__init__.py").body(index.module.body)
    return index


class PackageIndex:
    """All modules of a source, read lazily (a module is parsed the first time it is asked for)."""

    def __init__(self, source: Source):
        self.source = source
        self.paths = {source.module_name(p): p for p in source.files}
        self._modules: dict[str, ModuleIndex] = {}
        # torch mined as a source: its other modules are importable from the problem, so
        # only a module's own definitions are inlined and its imports stay imports
        self.follow = source.package.split(".")[0] != "torch"

    def module(self, name: str) -> ModuleIndex | None:
        if name not in self.paths:
            return None
        if name not in self._modules:
            self._modules[name] = read_module(name, self.paths[name])
        return self._modules[name]

    def modules(self):
        for name in self.paths:
            yield self.module(name)

    def inside(self, module: str) -> bool:
        if not self.follow:
            return False
        top = self.source.package.split(".")[0]
        return module == top or module.startswith(top + ".")

    def resolve(self, module: str, name: str, _seen: frozenset = frozenset()
                ) -> Definition | External | ModuleRef | None:
        """What ``name`` means at the top level of ``module``; None for builtins and the unknown."""
        if (module, name) in _seen or len(_seen) > 40:
            return None
        seen = _seen | {(module, name)}
        index = self.module(module)
        if index is None:
            return None
        if name in index.defs:
            return index.defs[name]
        if name in index.imports:
            target, attr = index.imports[name]
            if not self.follow:
                return External(target, attr)
            if attr is None:
                if target in self.paths:
                    return ModuleRef(target)
                return None if self.inside(target) else External(target, None)
            if target in self.paths:
                found = self.resolve(target, attr, seen)
                if found is not None:
                    return found
                sub = f"{target}.{attr}"
                if sub in self.paths:
                    return ModuleRef(sub)
                return None
            if f"{target}.{attr}" in self.paths:
                return ModuleRef(f"{target}.{attr}")
            return None if self.inside(target) else External(target, attr)
        for star in index.stars:
            if star in self.paths:
                found = self.resolve(star, name, seen)
                if found is not None:
                    return found
        return None

    def resolve_dotted(self, module: str, dotted: str) -> Definition | External | ModuleRef | None:
        """``layers.Mlp`` or ``nn.Module`` at the top level of ``module``."""
        head, *rest = dotted.split(".")
        found = self.resolve(module, head)
        for attr in rest:
            if isinstance(found, ModuleRef):
                found = self.resolve(found.module, attr)
            elif isinstance(found, External):
                found = External(f"{found.module}.{found.attr}" if found.attr else found.module,
                                 attr)
            else:
                return found
        return found
