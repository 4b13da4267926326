"""Canonical forms of a problem source: the basis of record ids and exact-duplicate keys.

The canonical text is the source parsed with ``ast`` and printed back with ``ast.unparse``:
comments, docstrings, blank lines and formatting disappear, so none of them change an id.
With ``rename_locals=True`` the names bound inside functions (arguments and local variables)
are replaced by positional placeholders too, so renamed variables meet as well.
"""
from __future__ import annotations

import ast
import hashlib

from .problem import parse


def _strip_docstrings(tree: ast.AST) -> None:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)):
                node.body = body[1:] or [ast.Pass()]


class _LocalRenamer(ast.NodeTransformer):
    """Renames function arguments and locally assigned names to v0, v1, ... per function."""

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        mapping: dict[str, str] = {}
        args = node.args
        for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
            if arg is not None and arg.arg != "self":
                mapping.setdefault(arg.arg, f"v{len(mapping)}")
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                mapping.setdefault(sub.id, f"v{len(mapping)}")
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and sub.id in mapping:
                sub.id = mapping[sub.id]
            elif isinstance(sub, ast.arg) and sub.arg in mapping:
                sub.arg = mapping[sub.arg]
        return node

    visit_AsyncFunctionDef = visit_FunctionDef


def canonical_source(source: str, *, rename_locals: bool = False) -> str:
    """Return the canonical text of ``source``; raises ``SyntaxError`` if it does not parse."""
    tree = parse(source)
    _strip_docstrings(tree)
    if rename_locals:
        tree = _LocalRenamer().visit(tree)
    return ast.unparse(tree)


def content_hash(text: str, length: int = 16) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:length]


def source_id(source: str) -> str:
    """Stable record id: a hash of the canonical source (comments/docstrings/format ignored)."""
    return content_hash(canonical_source(source))
