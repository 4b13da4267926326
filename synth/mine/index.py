"""Every file of a source read into its top-level definitions and imports, and names resolved
across the package's files (``from .layers import Mlp`` followed through re-exports to the
module that defines ``Mlp``). Nothing is imported or executed.

Files are read with Python's own ``ast`` (several times faster than libcst): that is enough to
list definitions and imports and to find candidates. A definition's libcst node, which
gathering rewrites, is parsed from the definition's own lines the first time it is asked for,
so the libcst cost is paid only for what a processed candidate reaches.
"""
from __future__ import annotations

import ast
import io
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


@dataclass(eq=False)
class Definition:
    """A top-level class, function or assignment of one module."""

    module: str
    name: str
    tree: ast.stmt     # the statement as ``ast`` reads it
    kind: str          # "class" | "function" | "assign"
    line: int
    path: Path
    lines: list[str] = field(default_factory=list, repr=False)  # its module's lines
    _node: cst.CSTNode | None = field(default=None, repr=False)

    @property
    def key(self) -> str:
        return f"{self.module}.{self.name}"

    @property
    def node(self) -> cst.CSTNode:
        """The libcst node (ClassDef | FunctionDef | SimpleStatementLine), parsed from the
        definition's own lines on first use."""
        if self._node is None:
            self._node = _parse_statement(self.lines, self.tree)
        return self._node

    def method(self, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        """The class's own method ``name`` (read from the ast: no libcst parse)."""
        for stmt in getattr(self.tree, "body", ()):
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == name:
                return stmt
        return None

    def base_texts(self) -> list[str]:
        """The dotted names of a class's bases (``nn.Module``, ``layers.Base``)."""
        bases = getattr(self.tree, "bases", ())
        return [text for text in map(ast_dotted, bases) if text]


def ast_dotted(node: ast.AST | None) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = ast_dotted(node.value)
        return f"{base}.{node.attr}" if base else ""
    return ""


def _slice(lines: list[str], node: ast.AST) -> str:
    """The exact source text of ``node`` (ast's column offsets count UTF-8 bytes)."""
    first, last = node.lineno, node.end_lineno
    chunk = "".join(lines[first - 1:last]).encode("utf-8")
    start = node.col_offset
    end = len(chunk) - len(lines[last - 1].encode("utf-8")) + node.end_col_offset
    return chunk[start:end].decode("utf-8")


def _parse_statement(lines: list[str], tree: ast.stmt) -> cst.CSTNode:
    """The libcst node of one statement: its lines (from its first decorator) parsed alone;
    an indented one (inside a module-level ``if``/``try``) under ``if True:``; one that
    shares its line with what precedes it, from its own columns."""
    first = min([tree.lineno] + [d.lineno for d in getattr(tree, "decorator_list", ())])
    head = lines[first - 1][:tree.col_offset] if first == tree.lineno else ""
    if head.strip():
        module = parse_trusted(_slice(lines, tree) + "\n")
        return module.body[0]
    text = "".join(lines[first - 1:tree.end_lineno])
    if tree.col_offset or (text[:1].isspace() and text.strip()):
        return parse_trusted("if True:\n" + text).body[0].body.body[0]
    return parse_trusted(text).body[0]


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
    defs: dict[str, Definition] = field(default_factory=dict)
    imports: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    stars: list[str] = field(default_factory=list)
    error: str | None = None
    # methods this module adds to ``logging.Logger`` when imported
    # (``logging.Logger.warning_once = warning_once``: transformers' logging helpers)
    logger_methods: list[str] = field(default_factory=list)


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


class _Reader:
    """Collects one module's top-level definitions and imports (also inside top-level
    ``if``/``try`` blocks: ``try: from x import y / except ImportError: y = None``; the first
    binding wins)."""

    def __init__(self, index: ModuleIndex, is_package: bool, lines: list[str]):
        self.index = index
        self.is_package = is_package
        self.lines = lines

    def _try(self, stmt: ast.Try) -> None:
        """``try: import optional / except ImportError: fallback``: the try body's bindings,
        unless it imports a third-party package a problem may not use; then the handlers'."""
        scratch = ModuleIndex(self.index.name, self.index.path, text="")
        _Reader(scratch, self.is_package, self.lines).body(stmt.body)
        top = self.index.name.split(".")[0]
        optional = any(target.split(".")[0] not in ALLOWED_ROOTS and target.split(".")[0] != top
                       for target, _ in scratch.imports.values())
        if not optional or not stmt.handlers:
            self.body(stmt.body)
        for handler in stmt.handlers:
            self.body(handler.body)

    def _test(self, test: ast.expr) -> bool | None:
        try:
            return truth(cst.parse_expression("(" + _slice(self.lines, test) + ")"))
        except (cst.ParserSyntaxError, UnicodeError, IndexError):
            return None

    def _if(self, stmt: ast.If) -> None:
        """Both branches' bindings (the first wins), or only the taken branch's when the test
        is a question about the environment (``environment.truth``: an optional package's
        availability, the torch version, an environment variable)."""
        taken = self._test(stmt.test)
        if taken is not False:
            self.body(stmt.body)
        if taken is not True:
            self.body(stmt.orelse)  # ``elif``: an ``If`` inside ``orelse``

    def define(self, name: str, node: ast.stmt, kind: str) -> None:
        if name not in self.index.defs and name not in self.index.imports:
            self.index.defs[name] = Definition(self.index.name, name, node, kind, node.lineno,
                                               self.index.path, self.lines)

    def imports(self, stmt: ast.Import | ast.ImportFrom) -> None:
        index = self.index
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                if alias.asname is not None:
                    index.imports.setdefault(alias.asname, (alias.name, None))
                else:
                    top = alias.name.split(".")[0]
                    index.imports.setdefault(top, (top, None))
            return
        target = _absolute(index.name, self.is_package, stmt.level, stmt.module or "")
        for alias in stmt.names:
            if alias.name == "*":
                index.stars.append(target)
            else:
                index.imports.setdefault(alias.asname or alias.name, (target, alias.name))

    def body(self, statements: list[ast.stmt]) -> None:
        for stmt in statements:
            if isinstance(stmt, ast.ClassDef):
                self.define(stmt.name, stmt, "class")
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.define(stmt.name, stmt, "function")
            elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
                self.imports(stmt)
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                if isinstance(stmt, ast.AnnAssign) and stmt.value is None:
                    continue
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                for target in targets:
                    if isinstance(target, ast.Name):
                        self.define(target.id, stmt, "assign")
                    elif isinstance(target, ast.Attribute) and \
                            ast_dotted(target.value).rpartition(".")[2] == "Logger" and \
                            self.index.imports.get(ast_dotted(target.value).split(".")[0]) \
                            == ("logging", None):
                        self.index.logger_methods.append(target.attr)
            elif isinstance(stmt, ast.If):
                self._if(stmt)
            elif isinstance(stmt, (ast.Try, getattr(ast, "TryStar", ast.Try))):
                self._try(stmt)


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
        tree = ast.parse(index.text)
    except (OSError, UnicodeDecodeError) as exc:
        index.error = f"cannot read: {exc}"
        return index
    except SyntaxError as exc:
        index.error = f"parse error at line {exc.lineno}: {exc.msg}"
        return index
    except (RecursionError, MemoryError, ValueError):
        index.error = "parse error: nesting too deep"
        return index
    _Reader(index, path.name == "__init__.py", io.StringIO(index.text, newline="").readlines()).body(
        tree.body)
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
