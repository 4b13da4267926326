"""The mutator framework: the ``Mutator`` base class and the libcst helpers its subclasses share.

A mutator is one ``libcst.CSTTransformer`` subclass. ``mutate(source, rng)`` runs it in two passes
over a ``MetadataWrapper`` (collect candidates, then rewrite the chosen ones; everything else,
comments and layout included, is left byte for byte), then vets the result with synth/checks.py
(static check, full-size meta-device trace, degeneracy rules). It returns a ``Mutation`` whose
``operation`` goes into ``provenance.operations``, or raises ``Refusal`` with the reason.

The mutators themselves: synth/op_mutators.py (which ops ``forward`` runs) and
synth/setting_mutators.py (sizes, dtype, layer geometry, input draws); synth/mutators.py lists
them all and chains them.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import libcst as cst
from kernelmill.core.canonical import canonical_source
from libcst.metadata import MetadataWrapper, QualifiedNameProvider

from .catalog import Catalog, Op, default_catalog
from .checks import Rejected, vet_source

if TYPE_CHECKING:
    from .trace import Trace

_EMPTY = cst.Module(body=[])


def code(node: cst.CSTNode) -> str:
    return _EMPTY.code_for_node(node)


@lru_cache(maxsize=32)
def _wrapper(source: str) -> MetadataWrapper:
    """Parsed module with metadata, shared by attempts and mutators (metadata resolves once)."""
    return MetadataWrapper(cst.parse_module(source))


class Refusal(Exception):
    """The mutator cannot produce a valid, different problem from this source; says why."""

    def __init__(self, mutator: str, reason: str):
        super().__init__(f"{mutator}: {reason}")
        self.mutator = mutator
        self.reason = reason


@dataclass
class Mutation:
    source: str
    operation: dict[str, Any]


def _int_value(node: cst.BaseExpression) -> int | None:
    if isinstance(node, cst.Integer):
        return int(node.value)
    if (isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus)
            and isinstance(node.expression, cst.Integer)):
        return -int(node.expression.value)
    return None


def _int_node(value: int) -> cst.BaseExpression:
    if value < 0:
        return cst.UnaryOperation(cst.Minus(), cst.Integer(str(-value)))
    return cst.Integer(str(value))


def _arg(call: cst.Call, name: str, position: int | None) -> cst.Arg | None:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == name:
            return arg
    if position is not None:
        positional = [a for a in call.args if a.keyword is None and a.star == ""]
        if position < len(positional):
            return positional[position]
    return None


def _replace_arg(call: cst.Call, old: cst.Arg, value: cst.BaseExpression) -> cst.Call:
    return call.with_changes(args=[a.with_changes(value=value) if a is old else a
                                   for a in call.args])


def _add_kwarg(call: cst.Call, name: str, value: cst.BaseExpression) -> cst.Call:
    args = list(call.args)
    if args:
        last = args[-1]
        if last.comma == cst.MaybeSentinel.DEFAULT or isinstance(last.comma, cst.MaybeSentinel):
            args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    args.append(cst.Arg(value=value, keyword=cst.Name(name),
                        equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                              whitespace_after=cst.SimpleWhitespace(""))))
    return call.with_changes(args=args)


def _forward_return(func: cst.FunctionDef) -> tuple[int, cst.Return] | None:
    body = func.body.body
    if not body or not isinstance(body[-1], cst.SimpleStatementLine):
        return None
    stmt = body[-1].body[0]
    if isinstance(stmt, cst.Return) and stmt.value is not None:
        return len(body) - 1, stmt
    return None


class Mutator(cst.CSTTransformer):
    """Base class: candidate collection, choice, rewrite, vetting and retries."""

    METADATA_DEPENDENCIES = (QualifiedNameProvider,)
    name = "mutator"
    attempts = 4
    needs_original_trace = False

    def __init__(self, catalog: Catalog | None = None):
        super().__init__()
        self.catalog = catalog or default_catalog()
        self.rng = random.Random(0)
        self.mode = "collect"
        self.stack: list[str] = []
        self.candidates: list[Any] = []
        self.chosen: Any = None
        self.params: dict[str, Any] = {}

    # -- where are we ---------------------------------------------------------------------
    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        self.stack.append(f"class:{node.name.value}")
        return True

    def leave_ClassDef(self, original_node, updated_node):
        self.stack.pop()
        return updated_node

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        self.stack.append(node.name.value)
        return True

    def leave_FunctionDef(self, original_node, updated_node):
        self.stack.pop()
        return self.rewrite_function(original_node, updated_node)

    def rewrite_function(self, original_node, updated_node):
        return updated_node

    @property
    def in_model(self) -> bool:
        return "class:Model" in self.stack

    @property
    def in_forward(self) -> bool:
        return self.in_model and "forward" in self.stack

    @property
    def in_init(self) -> bool:
        return self.in_model and "__init__" in self.stack

    @property
    def in_get_inputs(self) -> bool:
        return bool(self.stack) and self.stack[0] == "get_inputs"

    # -- name resolution ------------------------------------------------------------------
    def qualnames(self, node: cst.CSTNode) -> set[str]:
        try:
            return {q.name for q in self.get_metadata(QualifiedNameProvider, node, set())}
        except KeyError:
            return set()

    def call_op(self, call: cst.Call) -> tuple[Op | None, str]:
        """(catalog op, "function" | "method" | "module") for a call, or (None, "")."""
        for qn in sorted(self.qualnames(call.func)):
            op = self.catalog.lookup(qn)
            if op is not None:
                kind = "module" if qn.startswith("torch.nn.") and qn.split(".")[2][:1].isupper() \
                    else "function"
                return op, kind
        func = call.func
        if isinstance(func, cst.Attribute) and not self._is_module_ref(func.value):
            op = self.catalog.lookup(f"torch.Tensor.{func.attr.value}")
            if op is not None:
                return op, "method"
        return None, ""

    def _is_module_ref(self, expr: cst.BaseExpression) -> bool:
        """True for ``torch``, ``F``, ``torch.linalg``, ``self``: not a tensor receiver."""
        if isinstance(expr, cst.Name) and expr.value == "self":
            return True
        if isinstance(expr, (cst.Name, cst.Attribute)):
            names = self.qualnames(expr)
            return bool(names) and all(n.split(".")[0] in ("torch", "triton", "numpy", "math")
                                       for n in names)
        return False

    # -- driver ---------------------------------------------------------------------------
    def reset(self, rng: random.Random) -> None:
        self.rng = rng
        self.mode = "collect"
        self.stack = []
        self.candidates = []
        self.chosen = None
        self.params = {}

    def choose(self) -> None:
        """Pick what to change among ``self.candidates``; set ``self.chosen`` and ``self.params``."""
        self.chosen = self.candidates[self.rng.randrange(len(self.candidates))]

    def no_candidates(self) -> str:
        return "nothing to change"

    def rewrite(self, source: str, rng: random.Random) -> tuple[str, dict[str, Any]]:
        """One attempt: (new source, operation parameters); raises ``Refusal``."""
        self.reset(rng)
        try:
            wrapper = _wrapper(source)
        except cst.ParserSyntaxError as exc:
            raise Refusal(self.name, f"source does not parse: {exc.message}") from None
        wrapper.visit(self)
        if not self.candidates:
            raise Refusal(self.name, self.no_candidates())
        self.choose()
        self.mode = "rewrite"
        self.stack = []
        new_module = wrapper.visit(self)
        new_module = self.finish(new_module)
        return new_module.code, dict(self.params)

    def finish(self, module: cst.Module) -> cst.Module:
        return module

    def accept(self, original: Trace | None, mutant: Trace | None) -> str | None:
        """A reason to reject a mutant that is valid but not really different, else None."""
        return None

    def mutate(self, source: str, rng: random.Random) -> Mutation:
        original_trace = None
        if self.needs_original_trace:
            from .trace import TraceError, trace_source  # torch, on the first trace only
            try:
                original_trace = trace_source(source)
            except TraceError as exc:
                raise Refusal(self.name, f"the source itself does not trace ({exc})") from None
        try:
            original_canonical = canonical_source(source)
        except SyntaxError as exc:
            raise Refusal(self.name, f"source does not parse: {exc.msg}") from None
        last = "no attempt"
        for _ in range(self.attempts):
            new_source, params = self.rewrite(source, rng)
            if canonical_source(new_source) == original_canonical:
                last = "the rewrite changed nothing"
                continue
            try:
                _, new_trace = vet_source(new_source, strict=True)
            except Rejected as exc:
                last = f"{exc.label}: {exc.detail}"
                continue
            reason = self.accept(original_trace, new_trace)
            if reason:
                last = reason
                continue
            return Mutation(new_source, {"op": self.name, **params})
        raise Refusal(self.name, f"no valid result ({last})")
