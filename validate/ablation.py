"""Ablations of ``Model.forward``: one source per statement or op taken out (libcst).

A problem whose output does not change when one of its statements or ops is removed carries a
dead or redundant op (ReLU on non-negative values, a clamp that never clips, a result computed and
never used). A candidate may skip that work and still pass, so the problem misstates its task.

Two kinds of variant, each changing exactly one node of ``forward`` (formatting kept):

* ``RemoveStatement``: a simple statement becomes ``pass``. Returns, docstrings, ``pass`` and
  statements that only reshape or copy are not removed.
* ``BypassCall``: a call is replaced by the value it transforms: ``f(x, ...)`` and
  ``self.layer(x)`` by ``x``, a method call ``x.relu()`` by ``x``. Calls that only view, copy,
  allocate or convert (``view``, ``contiguous``, ``to``, ``torch.zeros`` ...) are left alone: they
  compute nothing a kernel could skip.

The parent makes the variants (``ablations``); the probe worker runs each one on the reference
inputs and weights and reports those whose output stays within tolerance.
"""
from __future__ import annotations

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

NO_COMPUTE = frozenset({
    "contiguous", "clone", "detach", "view", "view_as", "reshape", "reshape_as", "flatten",
    "unflatten", "squeeze", "unsqueeze", "to", "float", "double", "half", "bfloat16", "type",
    "type_as", "cuda", "cpu", "expand", "expand_as", "size", "dim", "numel", "requires_grad_",
    "super", "range", "len", "int", "bool", "tuple", "list", "dict", "print", "isinstance",
    "getattr", "setattr", "hasattr", "enumerate", "zip", "item", "tolist", "permute",
    "transpose", "t", "chunk", "split", "unbind", "movedim", "narrow", "select", "max_pool_size",
    "no_grad", "str", "repr", "format", "min", "max", "abs", "round", "sorted", "reversed",
})
FACTORIES = frozenset({
    "zeros", "ones", "empty", "full", "arange", "linspace", "randn", "rand", "randint",
    "randn_like", "rand_like", "tensor", "as_tensor", "zeros_like", "ones_like", "empty_like",
    "full_like", "eye", "tril_indices", "triu_indices", "Generator", "manual_seed",
})
MODULE_ROOTS = frozenset({"torch", "F", "nn", "functional", "math", "np", "numpy", "self"})


def _callee(func: cst.BaseExpression) -> tuple[str, str | None]:
    """(last name, leftmost root name) of a call's function expression."""
    if isinstance(func, cst.Name):
        return func.value, None
    if isinstance(func, cst.Attribute):
        root: cst.BaseExpression = func
        while isinstance(root, cst.Attribute):
            root = root.value
        return func.attr.value, root.value if isinstance(root, cst.Name) else None
    return "", None


def _bypass(call: cst.Call) -> cst.BaseExpression | None:
    """What the call is replaced by, or None when it should not be ablated."""
    name, root = _callee(call.func)
    if not name or name in NO_COMPUTE or name in FACTORIES:
        return None
    positional = [a for a in call.args if a.keyword is None and not a.star]
    if isinstance(call.func, cst.Attribute) and root not in MODULE_ROOTS:
        receiver = call.func.value
        # x.relu() / x.clamp(min=0) -> x ; but not torch-like roots bound to other names
        if isinstance(receiver, (cst.Name, cst.Attribute, cst.Call, cst.Subscript,
                                 cst.BinaryOperation)):
            return cst.ensure_type(receiver, cst.BaseExpression)
        return None
    if isinstance(call.func, cst.Attribute) and root == "self" and \
            isinstance(call.func.value, cst.Name):
        # self.layer(x) -> x
        return positional[0].value if positional else None
    if positional:
        return positional[0].value
    return None


def _forward(module: cst.Module) -> cst.FunctionDef | None:
    for node in module.body:
        if isinstance(node, cst.ClassDef) and node.name.value == "Model":
            for item in node.body.body:
                if isinstance(item, cst.FunctionDef) and item.name.value == "forward":
                    return item
    return None


def _statement_is_removable(stmt: cst.SimpleStatementLine) -> bool:
    for small in stmt.body:
        if isinstance(small, (cst.Return, cst.Pass, cst.Raise, cst.Assert, cst.Global,
                              cst.Nonlocal, cst.Import, cst.ImportFrom)):
            return False
        if isinstance(small, cst.Expr) and isinstance(small.value, (cst.SimpleString,
                                                                    cst.ConcatenatedString)):
            return False
    calls = _Collect.calls_in(stmt)
    # statements without calls that compute (only views, shapes, aliases) are not ablated
    return any(_bypass(c) is not None for c in calls) or any(
        isinstance(n, cst.BinaryOperation) for n in _Collect.binops_in(stmt))


class _Collect(cst.CSTVisitor):
    def __init__(self):
        self.calls: list[cst.Call] = []
        self.binops: list[cst.BinaryOperation] = []
        self.statements: list[cst.SimpleStatementLine] = []

    def visit_Call(self, node: cst.Call) -> None:
        self.calls.append(node)

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        self.binops.append(node)

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        self.statements.append(node)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return True

    @classmethod
    def calls_in(cls, node: cst.CSTNode) -> list[cst.Call]:
        c = cls()
        node.visit(c)
        return c.calls

    @classmethod
    def binops_in(cls, node: cst.CSTNode) -> list[cst.BinaryOperation]:
        c = cls()
        node.visit(c)
        return c.binops


class _ReplaceNode(cst.CSTTransformer):
    """Replace one node (found by identity) of the tree."""

    def __init__(self, target: cst.CSTNode, replacement_for):
        self.target = target
        self.replacement_for = replacement_for

    def on_leave(self, original_node, updated_node):
        if original_node is self.target:
            return self.replacement_for(updated_node)
        return updated_node


def _code(module: cst.Module, node: cst.CSTNode, limit: int = 60) -> str:
    text = " ".join(module.code_for_node(node).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def ablations(source: str, max_variants: int = 48) -> list[dict]:
    """Variants of ``source`` with one statement or call of ``Model.forward`` taken out.

    Each is ``{"label": "line N: <what> -> <replacement>", "source": str, "line": N}``; an empty
    list when there is no ``Model.forward`` or nothing to ablate.
    """
    try:
        wrapper = MetadataWrapper(cst.parse_module(source))
    except cst.ParserSyntaxError:
        return []
    module = wrapper.module
    forward = _forward(module)
    if forward is None:
        return []
    positions = wrapper.resolve(PositionProvider)
    found = _Collect()
    forward.body.visit(found)

    variants: list[dict] = []
    seen = {source}

    def add(target: cst.CSTNode, replacement_for, label: str) -> None:
        new = module.visit(_ReplaceNode(target, replacement_for)).code
        if new in seen:
            return
        seen.add(new)
        line = positions[target].start.line
        variants.append({"label": f"line {line}: {label}", "source": new, "line": line})

    for stmt in found.statements:
        if _statement_is_removable(stmt):
            add(stmt, lambda _node: cst.SimpleStatementLine(body=[cst.Pass()]),
                f"remove `{_code(module, stmt)}`")
    # a call whose result is itself called (``Quantizer(8, 2)(x)``: a module built and applied
    # in one line) makes a callable, not a value: its first argument cannot stand in for it
    called = {id(call.func) for call in found.calls if isinstance(call.func, cst.Call)}
    for call in found.calls:
        replacement = None if id(call) in called else _bypass(call)
        if replacement is None:
            continue
        add(call, lambda updated: _bypass(updated) or updated,
            f"`{_code(module, call)}` -> `{_code(module, replacement, 30)}`")
    return variants[:max_variants]
