"""Candidates of a source: every ``nn.Module`` subclass that has a forward (its own, a package
base's, or a torch layer's it extends), and every public top-level function over tensors that is
worth a problem (losses, ops, attention helpers: its first parameter is annotated ``Tensor``).
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass

import libcst as cst

from .index import Definition, External, ModuleRef, PackageIndex, ast_dotted

# torch.nn classes whose forward is no computation of their own
_CONTAINERS = {"Module", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict"}
_TENSOR_ANNOTATION = re.compile(r"^(torch\.)?Tensor$")


@dataclass
class Candidate:
    key: str             # "<package>:<module>.<qualname>", unique within a run
    kind: str            # "class" | "function"
    definition: Definition

    @property
    def name(self) -> str:
        return self.definition.name


def _method(node: cst.ClassDef, name: str) -> cst.FunctionDef | None:
    for stmt in node.body.body:
        if isinstance(stmt, cst.FunctionDef) and stmt.name.value == name:
            return stmt
    return None


class ModuleClasses:
    """Answers "is this class an nn.Module, and where does its forward come from?" (memoized)."""

    def __init__(self, index: PackageIndex):
        self.index = index
        self._memo: dict[str, tuple[bool, str | None]] = {}

    def bases(self, definition: Definition) -> list[Definition | External | ModuleRef | None]:
        return [self.index.resolve_dotted(definition.module, text)
                for text in definition.base_texts()]

    def describe(self, definition: Definition, depth: int = 0) -> tuple[bool, str | None]:
        """(is an nn.Module, where forward is: "own" | "package" | "torch" | None)."""
        key = definition.key
        if key in self._memo:
            return self._memo[key]
        self._memo[key] = (False, None)  # cycles
        is_module, forward = False, None
        if definition.method("forward") is not None:
            forward = "own"
        for base in self.bases(definition):
            if isinstance(base, External) and base.root == "torch" and base.attr and (
                    base.module.startswith("torch.nn") or base.attr in ("nn",)):
                is_module = True
                if forward is None and base.attr not in _CONTAINERS:
                    forward = "torch"
            elif isinstance(base, Definition) and base.kind == "class" and depth < 30:
                base_module, base_forward = self.describe(base, depth + 1)
                is_module = is_module or base_module
                if forward is None and base_forward is not None:
                    forward = "package"
        self._memo[key] = (is_module, forward)
        return is_module, forward


def _tensor_function(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    params = node.args.args
    if not params or node.name.startswith("_"):
        return False
    first = params[0]
    if first.arg in ("self", "cls") or first.annotation is None:
        return False
    return bool(_TENSOR_ANNOTATION.match(ast_dotted(first.annotation)))


def find_candidates(index: PackageIndex, *, functions: bool = True):
    """Yield the candidates of every readable module, and ``(module, error)`` for each that
    does not parse."""
    classes = ModuleClasses(index)
    for name in index.paths:
        if not index.source.in_scope(name):
            continue
        module = index.module(name)
        if module.error is not None:
            yield module
            continue
        for definition in module.defs.values():
            if definition.module != module.name:
                continue
            if definition.kind == "class":
                is_module, forward = classes.describe(definition)
                if is_module and forward is not None:
                    yield Candidate(f"{index.source.spec}:{definition.key}", "class",
                                    definition)
            elif functions and definition.kind == "function" and \
                    _tensor_function(definition.tree):
                yield Candidate(f"{index.source.spec}:{definition.key}", "function",
                                definition)
