"""The rewrites ``gather`` makes to a definition's libcst node before it is written out:
references renamed and decorators dropped (``_Rewrite``, ``_without_decorators``), type tests
and registry entries that lead to a package a problem may not use removed
(``_ForeignTypeTests``, ``_ForeignEntries``), with the helpers that find what they act on
(decorators, dict entry values, a class's members) and ``_foreign_imports``, the imports a
problem's code still makes of such a package. Moved out of ``gather``.
"""
from __future__ import annotations

import ast

import libcst as cst

from .index import _dotted, ast_dotted


def _foreign_imports(code: str, allowed: frozenset[str]) -> list[str]:
    """The absolute imports anywhere in ``code`` (function bodies included) of a package a
    problem may not use. A relative import is not one: in a problem's own file it can only
    fail, where it runs."""
    found = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names
                      if alias.name.split(".")[0] not in allowed]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module and \
                node.module.split(".")[0] not in allowed:
            found.append(node.module)
    return sorted(set(found))


class _Rewrite(cst.CSTTransformer):
    """Renames references (``names``: old -> new; ``chains``: ``layers.Mlp`` -> ``Mlp``) and
    drops the decorators in ``dropped`` (their code text)."""

    def __init__(self, names: dict[str, str], chains: dict[str, str], dropped: set[str],
                 top: str, new_top: str):
        super().__init__()
        self.names, self.chains, self.dropped = names, chains, dropped
        self.top, self.new_top = top, new_top
        self.depth = 0

    def visit_Annotation(self, node: cst.Annotation) -> bool:
        return False

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        return _dotted(node) not in self.chains

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute):
        dotted = _dotted(original)
        if dotted in self.chains:
            return cst.Name(self.chains[dotted])
        if updated.attr is original.attr:
            return updated
        return updated.with_changes(attr=original.attr)

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.Name:
        new = self.names.get(original.value)
        return updated.with_changes(value=new) if new else updated

    def leave_Param(self, original: cst.Param, updated: cst.Param) -> cst.Param:
        return updated.with_changes(name=original.name)

    def leave_Arg(self, original: cst.Arg, updated: cst.Arg) -> cst.Arg:
        return updated.with_changes(keyword=original.keyword)

    def _decorators(self, updated):
        kept = [d for d in updated.decorators
                if cst.Module([]).code_for_node(d.decorator) not in self.dropped]
        return kept

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        self.depth += 1
        return True

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef):
        self.depth -= 1
        name = self.new_top if self.depth == 0 and original.name.value == self.top \
            else original.name.value
        return updated.with_changes(name=cst.Name(name), decorators=self._decorators(updated))

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        self.depth += 1
        return True

    def leave_ClassDef(self, original: cst.ClassDef, updated: cst.ClassDef):
        self.depth -= 1
        name = self.new_top if self.depth == 0 and original.name.value == self.top \
            else original.name.value
        return updated.with_changes(name=cst.Name(name), decorators=self._decorators(updated))


class _ForeignTypeTests(cst.CSTTransformer):
    """``isinstance(x, np.ndarray)`` is ``False`` where numpy is never imported: a problem runs
    with torch alone, so no value of a type from a package it may not use reaches it. Tuples of
    types lose their foreign members; ``foreign`` holds the names (and chains) that lead there."""

    def __init__(self, foreign: set[str]):
        super().__init__()
        self.foreign = foreign
        self.changed = 0

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if not (isinstance(original.func, cst.Name) and original.func.value == "isinstance"
                and len(original.args) == 2 and original.args[1].keyword is None):
            return updated
        types = original.args[1].value
        members = [e.value for e in types.elements] if isinstance(types, cst.Tuple) \
            else [types]
        kept = [e for e in members if _dotted(e) not in self.foreign]
        if len(kept) == len(members):
            return updated
        self.changed += 1
        if not kept:
            return cst.Name("False")
        if len(kept) == 1:
            return updated.with_changes(args=[updated.args[0],
                                              updated.args[1].with_changes(value=kept[0])])
        return updated.with_changes(args=[updated.args[0], updated.args[1].with_changes(
            value=cst.Tuple([cst.Element(e) for e in kept]))])


class _ForeignEntries(cst.CSTTransformer):
    """A registry (``_NORM_MAP = dict(batchnorm=nn.BatchNorm2d, frozenbatchnorm2d=
    FrozenBatchNorm2d)``, or a ``{...}`` literal) loses the entries whose value comes from a
    package a problem may not use; looking such a key up fails when the problem is probed."""

    def __init__(self, foreign: set[str]):
        super().__init__()
        self.foreign = foreign
        self.changed = 0

    def _is_foreign(self, value: cst.BaseExpression) -> bool:
        return bool(_dotted(value)) and _dotted(value) in self.foreign

    def leave_Dict(self, original: cst.Dict, updated: cst.Dict) -> cst.Dict:
        kept = [e for e in updated.elements
                if not (isinstance(e, cst.DictElement) and self._is_foreign(e.value))]
        if len(kept) == len(updated.elements):
            return updated
        self.changed += 1
        if kept:  # no comma left dangling after the last entry kept
            kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        return updated.with_changes(elements=kept)

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        if not (isinstance(updated.func, cst.Name) and updated.func.value == "dict"):
            return updated
        kept = [a for a in updated.args if a.keyword is None or not self._is_foreign(a.value)]
        if len(kept) == len(updated.args):
            return updated
        self.changed += 1
        if kept:
            kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        return updated.with_changes(args=kept)


def _decorator_texts(node: cst.CSTNode) -> list[cst.Decorator]:
    """The decorators of a definition and of the methods of a class (no full walk: a libcst
    visitor over every node was half the gathering time)."""
    found: list[cst.Decorator] = list(getattr(node, "decorators", ()))
    if isinstance(node, cst.ClassDef):
        for stmt in node.body.body:
            found.extend(getattr(stmt, "decorators", ()))
    return found


def _entry_values(tree: ast.AST) -> set[str]:
    """The dotted names that are values of a dict display or keyword arguments of a
    ``dict(...)`` call in ``tree``: all that ``_ForeignEntries`` can remove."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            found.update(ast_dotted(v) for v in node.values if v is not None)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id == "dict":
            found.update(ast_dotted(k.value) for k in node.keywords if k.arg is not None)
    return found


def _members(node: cst.CSTNode) -> list[cst.CSTNode]:
    """A class's own decorated kinds of statement (methods, nested classes), in order."""
    if not isinstance(node, cst.ClassDef):
        return []
    return [s for s in node.body.body if isinstance(s, (cst.FunctionDef, cst.ClassDef))]


def _dropped_decorators(node: cst.CSTNode, tree: ast.stmt, dropped: set[str]
                        ) -> frozenset[int] | None:
    """The ids of the ``ast`` decorators of a definition and of its class's methods whose
    code text is in ``dropped``, matched to ``node``'s by position; None when the two do not
    line up."""
    members = [a for a in getattr(tree, "body", ()) if isinstance(
        a, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))] \
        if isinstance(tree, ast.ClassDef) else []
    pairs = [(node, tree), *zip(_members(node), members)]
    if len(members) != len(_members(node)) or any(
            len(n.decorators) != len(a.decorator_list) for n, a in pairs):
        return None
    code = cst.Module([]).code_for_node
    return frozenset(id(ad) for n, a in pairs for d, ad in zip(n.decorators, a.decorator_list)
                     if code(d.decorator) in dropped)


def _without_decorators(node: cst.CSTNode, dropped: set[str]) -> cst.CSTNode:
    """``node`` without the decorators in ``dropped`` (code texts) on it and on its class's
    methods: only those statements are rebuilt (``_Rewrite`` walks every node)."""
    code = cst.Module([]).code_for_node

    def strip(n):
        kept = [d for d in n.decorators if code(d.decorator) not in dropped]
        return n.with_changes(decorators=kept) if len(kept) != len(n.decorators) else n

    stripped = {id(m): new for m in _members(node) if (new := strip(m)) is not m}
    node = strip(node)
    if stripped:
        node = node.with_changes(body=node.body.with_changes(
            body=[stripped.get(id(s), s) for s in node.body.body]))
    return node
