"""What gathering puts in place of code a problem cannot carry.

* A base class whose own closure needs a package a problem may not use (a pretrained-model
  base: loading, saving, hub access, through ``huggingface_hub``), or that is too large to be
  one problem, is replaced by ``MinedBase``: an ``nn.Module`` that keeps what a model's own
  code reads of such a base (its ``config``, ``post_init``, the dtype and device of its
  parameters). A base that is no ``nn.Module`` (a mixin) is dropped when the class keeps
  another base. The candidate's own code is unchanged; what it calls of the base that the
  stand-in lacks fails when probed, so such a candidate is still rejected.
* An import inside a function body (``from .utils import helper``, a lazy import) of names
  the package defines is gathered like any reference and the statement is removed:
  in a problem there is no package to import from. One whose names cannot be gathered stays
  as written (it fails only where it runs).
* An absolute import inside a function body of a package a problem may not use
  (``import flash_attn`` in a helper only an optional attention backend calls) becomes
  ``raise ModuleNotFoundError``: the function behaves as where that package is not installed,
  which the package's own code already allows for, and a problem whose forward does reach it
  fails when probed. The problem's text then imports only torch and the standard library.
* A module that adds methods to ``logging.Logger`` when imported (transformers'
  ``logging.Logger.warning_once = warning_once``) is not imported by a problem, so in the
  definitions gathered from it ``logging.getLogger(...)`` becomes ``MinedLogger.get(...)``: a
  ``logging.Logger`` subclass that has those methods (each logs at the level its name starts
  with), defined in the problem; the standard library's ``Logger`` is left as it is.
"""
from __future__ import annotations

import ast

import libcst as cst

from .index import _absolute, _dotted

STANDIN_NAME = "MinedBase"
STANDIN_CODE = f'''class {STANDIN_NAME}(nn.Module):
    """A torch-only stand-in for the package's base class (its loading, saving and hub code
    needs packages a problem does not use): the config it is built with, a no-op
    ``post_init``, and the dtype and device of its parameters."""

    def __init__(self, config=None, *args, **kwargs):
        super().__init__()
        if config is not None:
            self.config = config
        self.gradient_checkpointing = False

    def post_init(self):
        return None

    @property
    def dtype(self):
        for parameter in self.parameters():
            return parameter.dtype
        return torch.get_default_dtype()

    @property
    def device(self):
        for parameter in self.parameters():
            return parameter.device
        return torch.device("cpu")'''


LOGGER_NAME = "MinedLogger"
_LEVELS = ("debug", "info", "warning", "warn", "error", "critical", "fatal", "exception")


def logger_code(methods: list[str], package: str) -> str:
    """``MinedLogger``: a ``logging.Logger`` with the ``methods`` ``package`` adds to it."""
    listed = ", ".join(f"``{m}``" for m in methods)
    lines = ["import logging", "", "", f"class {LOGGER_NAME}(logging.Logger):",
             f'    """A ``logging.Logger`` with the methods {package} adds to it when imported',
             f"    ({listed}), which a problem does not import: each logs at the level its",
             '    name starts with."""', "", "    @classmethod",
             "    def get(cls, name=None):", '        return cls(name or "root")']
    for method in methods:
        level = max((lv for lv in _LEVELS if method.startswith(lv)), key=len, default=None)
        lines += ["", f"    def {method}(self, *args, **kwargs):",
                  f"        self.{level}(*args, **kwargs)" if level else "        return None"]
    return "\n".join(lines)


class LoggerStandIn(cst.CSTTransformer):
    """``logging.getLogger(...)`` (``logging`` under any of ``names``) -> ``MinedLogger.get(...)``."""

    def __init__(self, names: set[str]):
        self.names = names
        self.changed = False

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        func = updated.func
        if isinstance(func, cst.Attribute) and func.attr.value == "getLogger" and \
                isinstance(func.value, cst.Name) and func.value.value in self.names:
            self.changed = True
            return updated.with_changes(func=cst.Attribute(cst.Name(LOGGER_NAME),
                                                           cst.Name("get")))
        return updated


def _body_imports(tree: ast.AST):
    """The import statements inside function bodies (any depth) of a definition's ``ast``."""
    stack = [(tree, False)]  # (node, inside a function)
    while stack:
        node, inside = stack.pop()
        if inside and isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        inside = inside or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        stack.extend((child, inside) for child in ast.iter_child_nodes(node)
                     if isinstance(child, ast.stmt))


def has_body_import(tree: ast.AST) -> bool:
    """Whether a definition (its ``ast``) imports anything inside a function body."""
    return next(_body_imports(tree), None) is not None


def has_lazy_import(tree: ast.AST, package: str) -> bool:
    """Whether a definition (its ``ast``) imports from ``package`` (or relatively) inside a
    function body: the cheap test before libcst's walk (``LazyImports``)."""
    return any(isinstance(node, ast.ImportFrom) and
               (node.level or (node.module or "").split(".")[0] == package)
               for node in _body_imports(tree))


def has_foreign_body_import(tree: ast.AST, allowed: frozenset[str], package: str) -> bool:
    """Whether a definition (its ``ast``) imports, inside a function body, a package that is
    neither one a problem may use (``allowed``) nor ``package`` itself: where gathered, that
    import raises (``RaiseForeignImports``)."""
    for node in _body_imports(tree):
        roots = [a.name.split(".")[0] for a in node.names] if isinstance(node, ast.Import) \
            else [node.module.split(".")[0]] if not node.level and node.module else []
        if any(root not in allowed and root != package for root in roots):
            return True
    return False


class LazyImports(cst.CSTVisitor):
    """``from X import a, b`` statements inside function bodies (any depth), with their
    absolute module (``module``: where the definition lives; ``is_package``: it is an
    ``__init__``). ``found``: (statement node, target module, [(local name, imported name)])."""

    def __init__(self, module: str, is_package: bool):
        self.module, self.is_package = module, is_package
        self.depth = 0
        self.found: list[tuple[cst.ImportFrom, str, list[tuple[str, str]]]] = []

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.depth += 1

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.depth -= 1

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        if self.depth and not isinstance(node.names, cst.ImportStar):
            target = _absolute(self.module, self.is_package, len(node.relative),
                               _dotted(node.module) if node.module is not None else "")
            names = [(_dotted(a.asname.name) if a.asname is not None else _dotted(a.name),
                      _dotted(a.name)) for a in node.names]
            if all(local and "." not in name for local, name in names):
                self.found.append((node, target, names))
        return False


class DropImports(cst.CSTTransformer):
    """Each import statement in ``nodes`` (by identity) is removed (``pass`` where a block
    would be left empty)."""

    def __init__(self, nodes: set[int]):
        super().__init__()
        self.nodes = nodes

    def leave_SimpleStatementLine(self, original: cst.SimpleStatementLine,
                                  updated: cst.SimpleStatementLine):
        kept = [new for old, new in zip(original.body, updated.body) if id(old) not in self.nodes]
        if len(kept) == len(original.body):
            return updated
        if not kept:
            return cst.RemoveFromParent()
        kept[-1] = kept[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
        return updated.with_changes(body=kept)

    def leave_IndentedBlock(self, original: cst.IndentedBlock, updated: cst.IndentedBlock):
        if updated.body:
            return updated
        return updated.with_changes(body=[cst.SimpleStatementLine([cst.Pass()])])


def replace_bases(node: cst.ClassDef, replaced: dict[str, str | None]) -> cst.ClassDef:
    """``node`` with the bases in ``replaced`` (their dotted text) written as the stand-in
    (a value) or dropped (None); a stand-in is written once."""
    bases, standin = [], False
    for arg in node.bases:
        text = _dotted(arg.value) if arg.keyword is None else ""
        if text not in replaced:
            bases.append(arg)
        elif replaced[text] is not None and not standin:
            standin = True
            bases.append(arg.with_changes(value=cst.Name(replaced[text])))
    if bases:
        bases[-1] = bases[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return node.with_changes(bases=bases)


class RaiseForeignImports(cst.CSTTransformer):
    """Each absolute import inside a function body (any depth) of a module whose root is not
    in ``allowed`` becomes ``raise ModuleNotFoundError("No module named ...")`` (the line it
    was on: nothing after a raise runs). ``changed`` says whether one was."""

    def __init__(self, allowed: frozenset[str]):
        super().__init__()
        self.allowed = allowed
        self.depth = 0
        self.changed = False

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.depth += 1

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef):
        self.depth -= 1
        return updated

    def leave_SimpleStatementLine(self, original: cst.SimpleStatementLine,
                                  updated: cst.SimpleStatementLine):
        if not self.depth:
            return updated
        for small in updated.body:
            if isinstance(small, cst.Import):
                modules = [_dotted(alias.name) for alias in small.names]
            elif isinstance(small, cst.ImportFrom) and not small.relative and \
                    small.module is not None:
                modules = [_dotted(small.module)]
            else:
                continue
            foreign = [m for m in modules if m and m.split(".")[0] not in self.allowed]
            if foreign:
                self.changed = True
                message = cst.SimpleString(repr(f"No module named {foreign[0].split('.')[0]!r}"))
                error = cst.Call(cst.Name("ModuleNotFoundError"), [cst.Arg(message)])
                return updated.with_changes(body=[cst.Raise(exc=error)])
        return updated

