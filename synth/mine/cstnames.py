"""The names a definition uses, read from its libcst node (``_Names``: everything;
``_LoadNames``: what it uses while its module loads). Moved out of ``gather``; ``astnames``
reads the same from the ``ast``, several times faster (``Gatherer._references`` picks one).
"""
from __future__ import annotations

import libcst as cst

from .index import _dotted


class _Names(cst.CSTVisitor):
    """Free-looking names of a definition: ``Name`` loads and the dotted chains they start,
    outside annotations, attribute names, keyword names and parameter names."""

    def __init__(self):
        self.names: set[str] = set()
        self.chains: set[str] = set()

    def visit_Annotation(self, node: cst.Annotation) -> bool:
        return False

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        dotted = _dotted(node)
        if dotted:
            self.chains.add(dotted)
            self.names.add(dotted.split(".")[0])
            return False
        return True

    def visit_Name(self, node: cst.Name) -> None:
        self.names.add(node.value)

    def visit_Param(self, node: cst.Param) -> bool:
        for part in (node.default,):
            if part is not None:
                part.visit(self)
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        node.value.visit(self)
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return False

    def visit_Import(self, node: cst.Import) -> bool:
        return False


class _LoadNames(_Names):
    """The names a definition uses when its module is loaded: everything but function bodies
    (their defaults and decorators are load-time; a body runs only when called)."""

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        for decorator in node.decorators:
            decorator.visit(self)
        node.params.visit(self)
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False
