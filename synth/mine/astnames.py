"""The names a definition uses, read from its ``ast`` (``cstnames._Names`` and ``_LoadNames``
read the same from its libcst node, several times slower): ``Name`` loads and stores, the
dotted chains they start (``layers.Mlp``), outside annotations, attribute names, keyword
names and parameter names. ``load`` holds what the definition uses while its module loads:
everything but function bodies (their decorators and defaults run at load time) and lambdas.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field

from .index import ast_dotted

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


@dataclass
class Names:
    names: set[str] = field(default_factory=set)
    chains: set[str] = field(default_factory=set)


class _Walk:
    def __init__(self, skip: frozenset[int] = frozenset()):
        self.all, self.load = Names(), Names()
        self.skip = skip  # ids of decorator nodes not read (dropped from the definition)

    def add(self, name: str, loading: bool, chain: str | None = None) -> None:
        for into in (self.all, self.load) if loading else (self.all,):
            into.names.add(name)
            if chain is not None:
                into.chains.add(chain)

    def args(self, args: ast.arguments, loading: bool) -> None:
        for default in [*args.defaults, *args.kw_defaults]:
            if default is not None:
                self.expr(default, loading)

    def expr(self, node: ast.AST, loading: bool) -> None:
        """``node`` and what it holds (an iterative walk: deep expressions do not recurse)."""
        stack = [(node, loading)]
        while stack:
            node, loading = stack.pop()
            if isinstance(node, ast.Name):
                self.add(node.id, loading)
            elif isinstance(node, ast.Constant):
                if node.value is True or node.value is False or node.value is None:
                    self.add(repr(node.value), loading)  # a libcst Name
            elif isinstance(node, ast.Attribute):
                dotted = ast_dotted(node)
                if dotted:
                    self.add(dotted.split(".")[0], loading, dotted)
                else:  # ``f(x).to``: libcst reads the attribute's name as a Name too
                    self.add(node.attr, loading)
                    stack.append((node.value, loading))
            else:
                stack.extend(self.children(node, loading))

    def children(self, node: ast.AST, loading: bool) -> list[tuple[ast.AST, bool]]:
        """What to walk inside a statement or a compound expression (and its names)."""
        if isinstance(node, _FUNCTIONS):
            self.add(node.name, False)  # a libcst FunctionDef's name is a Name
            self.args(node.args, loading)
            return [(d, loading) for d in node.decorator_list if id(d) not in self.skip] + \
                [(s, False) for s in node.body]
        if isinstance(node, ast.Lambda):
            self.args(node.args, False)
            return [(node.body, False)]
        if isinstance(node, ast.ClassDef):
            self.add(node.name, loading)
            return [(child, loading) for child in
                    [*(d for d in node.decorator_list if id(d) not in self.skip), *node.bases,
                     *node.keywords, *node.body]]
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            return []
        if isinstance(node, ast.AnnAssign):  # the annotation is not read
            return [(child, loading) for child in (node.target, node.value) if child is not None]
        if isinstance(node, ast.keyword):
            return [(node.value, loading)]
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            for name in node.names:
                self.add(name, loading)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            self.add(node.name, loading)
        return [(child, loading) for child in ast.iter_child_nodes(node)]


def ast_names(tree: ast.stmt, skip: frozenset[int] = frozenset()) -> tuple[Names, Names]:
    """(every name and chain, the load-time ones) of a class or function definition, without
    the decorators whose ids are in ``skip``."""
    walk = _Walk(skip)
    walk.expr(tree, True)
    return walk.all, walk.load
