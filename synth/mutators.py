"""Mutators: libcst codemods that turn one valid problem into a different valid problem.

Each mutator is one ``libcst.CSTTransformer`` subclass. Its docstring says what it changes and when
it refuses. ``mutate(source, rng)`` runs it in two passes over a ``MetadataWrapper`` (collect
candidates, then rewrite the chosen ones; everything else, comments and layout included, is left
byte for byte), then vets the result with synth/checks.py (static check, full-size meta-device trace,
degeneracy rules). It returns a ``Mutation`` whose ``operation`` goes into
``provenance.operations``, or raises ``Refusal`` with the reason.

Names are resolved with libcst's ``QualifiedNameProvider``: ``F.relu``, ``torch.relu``,
``torch.nn.functional.relu`` and ``from torch.nn.functional import relu as r`` all resolve to the
catalog's relu; method calls (``x.relu()``) cannot be resolved statically and are matched by
attribute name as ``torch.Tensor.relu``.
"""
from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import libcst as cst
from kernelmill.core.canonical import canonical_source
from libcst.metadata import MetadataWrapper, QualifiedNameProvider

from .catalog import Catalog, Op, default_catalog
from .checks import Rejected, vet_source
from .resize import ResizeError, resize_source

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


# -----------------------------------------------------------------------------------------
class ResizeMutator(Mutator):
    """Scales the module-level size constants by a factor (synth/resize.py does the work).

    Refuses when the source has no resizable constants (everything protected or too small)."""

    name = "resize"
    FACTORS = (0.5, 0.7, 1.4, 2.0)

    def rewrite(self, source: str, rng: random.Random) -> tuple[str, dict[str, Any]]:
        factor = self.FACTORS[rng.randrange(len(self.FACTORS))]
        try:
            result = resize_source(source, factor=factor)
        except ResizeError as exc:
            raise Refusal(self.name, str(exc)) from None
        return result.source, {"factor": round(float(result.factor), 4)}


# -----------------------------------------------------------------------------------------
FLOAT_FACTORIES = {"torch.randn", "torch.rand", "torch.randn_like", "torch.rand_like", "torch.zeros",
                   "torch.ones", "torch.empty", "torch.full", "torch.zeros_like", "torch.ones_like",
                   "torch.empty_like", "torch.full_like", "torch.eye", "torch.linspace",
                   "torch.normal"}
PARAM_LAYERS = {f"torch.nn.{c}" for c in (
    "Linear", "Bilinear", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d",
    "ConvTranspose3d", "LayerNorm", "RMSNorm", "GroupNorm", "BatchNorm1d", "BatchNorm2d",
    "BatchNorm3d", "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "Embedding",
    "EmbeddingBag", "PReLU", "MultiheadAttention", "LSTM", "GRU", "RNN", "LazyLinear")}
FLOAT_DTYPES = {"torch.float32", "torch.float", "torch.float16", "torch.half", "torch.bfloat16"}
DTYPE_NAMES = ("float32", "float16", "bfloat16")


class DtypeMutator(Mutator):
    """Changes the problem's floating-point dtype among float32 / float16 / bfloat16.

    Sets a module-level ``DTYPE = torch.<dtype>`` constant (inserted after the size constants when
    absent), passes ``dtype=DTYPE`` to the float tensor factories of ``get_inputs`` and
    ``Model.__init__`` and to the parameter-holding ``nn`` layers, and turns ``.float()`` in
    ``get_inputs`` into ``.to(DTYPE)``. Refuses when ``get_inputs`` draws no floating-point tensor
    (integer-heavy problems), when ``forward`` works in float64, and when an op of ``forward`` has
    no kernel for the new dtype according to the catalog."""

    name = "dtype"

    def reset(self, rng):
        super().reset(rng)
        self.current = "float32"
        self.float_inputs = 0
        self.blockers: list[str] = []
        self.forward_ops: list[Op] = []
        self.has_dtype_constant = False

    def visit_Assign(self, node: cst.Assign) -> None:
        if (not self.stack and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name)
                and node.targets[0].target.value == "DTYPE"):
            self.has_dtype_constant = True
            text = code(node.value)
            for name in DTYPE_NAMES:
                if text.endswith(name):
                    self.current = name
            if text.endswith(("half",)):
                self.current = "float16"

    def visit_Call(self, node: cst.Call) -> None:
        if self.mode != "collect":
            return
        names = self.qualnames(node.func)
        if self.in_get_inputs and names & FLOAT_FACTORIES:
            dtype = _arg(node, "dtype", None)
            if dtype is None or code(dtype.value) in FLOAT_DTYPES or code(dtype.value) == "DTYPE":
                self.float_inputs += 1
                if dtype is not None and code(dtype.value) != "DTYPE":
                    self.current = code(dtype.value).replace("torch.", "").replace(
                        "half", "float16").replace("float", "float32") if code(dtype.value) in (
                        "torch.half", "torch.float") else code(dtype.value).replace("torch.", "")
        if self.in_forward:
            text = code(node.func)
            if text.endswith((".double", "float64")) or "float64" in code(node):
                self.blockers.append("forward computes in float64")
            op, _ = self.call_op(node)
            if op is not None:
                self.forward_ops.append(op)

    def leave_Module(self, original_node, updated_node):
        if self.mode == "collect":
            if self.float_inputs and not self.blockers:
                self.candidates = [d for d in DTYPE_NAMES if d != self.current]
        return updated_node

    def no_candidates(self) -> str:
        if self.blockers:
            return self.blockers[0]
        return "get_inputs draws no floating-point tensor (integer-heavy problem)"

    def choose(self) -> None:
        options = list(self.candidates)
        self.rng.shuffle(options)
        for dtype in options:
            missing = [op.name for op in self.forward_ops if dtype not in op.dtypes]
            if not missing:
                self.chosen = dtype
                self.params = {"from": self.current, "to": dtype}
                return
        raise Refusal(self.name, f"op(s) without a kernel for {', '.join(options)}: "
                                 f"{', '.join(sorted({op.name for op in self.forward_ops if options[0] not in op.dtypes}))}")

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        if self.mode != "rewrite":
            return updated_node
        names = self.qualnames(original_node.func)
        in_scope = self.in_get_inputs or self.in_init
        if in_scope and (names & FLOAT_FACTORIES or (self.in_init and names & PARAM_LAYERS)):
            dtype = _arg(updated_node, "dtype", None)
            if dtype is None:
                return _add_kwarg(updated_node, "dtype", cst.Name("DTYPE"))
            if code(dtype.value) in FLOAT_DTYPES:
                return _replace_arg(updated_node, dtype, cst.Name("DTYPE"))
            return updated_node
        if (self.in_get_inputs and isinstance(updated_node.func, cst.Attribute)
                and updated_node.func.attr.value == "float" and not updated_node.args):
            return updated_node.with_changes(func=updated_node.func.with_changes(attr=cst.Name("to")),
                                             args=[cst.Arg(cst.Name("DTYPE"))])
        return updated_node

    def leave_Assign(self, original_node, updated_node):
        if (self.mode == "rewrite" and not self.stack and len(updated_node.targets) == 1
                and isinstance(updated_node.targets[0].target, cst.Name)
                and updated_node.targets[0].target.value == "DTYPE"):
            return updated_node.with_changes(value=cst.parse_expression(f"torch.{self.chosen}"))
        return updated_node

    def finish(self, module: cst.Module) -> cst.Module:
        if self.has_dtype_constant:
            return module
        body = list(module.body)
        insert_at = 0
        for i, stmt in enumerate(body):
            if isinstance(stmt, cst.SimpleStatementLine):
                first = stmt.body[0]
                if isinstance(first, (cst.Import, cst.ImportFrom)) or (isinstance(first, cst.Assign) and isinstance(first.targets[0].target, cst.Name)
                      and first.targets[0].target.value.isupper()):
                    insert_at = i + 1
            elif isinstance(stmt, (cst.ClassDef, cst.FunctionDef)):
                break
        line = cst.parse_statement(f"DTYPE = torch.{self.chosen}\n")
        body.insert(insert_at, line)
        return module.with_changes(body=body)


# -----------------------------------------------------------------------------------------
def _first_arg_code(call: cst.Call, kind: str) -> str | None:
    if kind == "method":
        return code(call.func.value) if isinstance(call.func, cst.Attribute) else None
    arg = _arg(call, "input", 0)
    return code(arg.value) if arg is not None else None


def _dim_of(call: cst.Call, op: Op, kind: str) -> cst.Arg | None:
    position = None
    if "dim" in op.sig:
        position = op.sig.index("dim") - (1 if kind == "method" else 0)
    return _arg(call, "dim", position)


class SwapOpMutator(Mutator):
    """Swaps one op for a compatible one of its catalog swap group.

    relu -> gelu / silu / mish / leaky_relu ..., sigmoid <-> tanh, sum -> mean / amax / logsumexp,
    softmax <-> log_softmax, cumsum <-> logcumsumexp, max_pool <-> avg_pool, LayerNorm <-> RMSNorm,
    BatchNorm <-> InstanceNorm, the loss of a regression or classification family, and ``nn``
    activation modules (``nn.ReLU()`` -> ``nn.GELU()``). The reduction ``dim`` and ``keepdim`` are
    carried over. Refuses when no call in ``forward`` (or activation/norm module in ``__init__``)
    has a swappable op, or when every replacement is invalid or degenerate."""

    name = "swap_op"

    def visit_Call(self, node: cst.Call) -> None:
        if self.mode != "collect" or not (self.in_forward or self.in_init):
            return
        op, kind = self.call_op(node)
        if op is None or not op.swap:
            return
        if kind == "module":
            if not self.in_init:
                return
            targets = [t for t in self.catalog.swap_group(op) if self._module_target(t)]
        else:
            if not self.in_forward:
                return
            targets = [t for t in self.catalog.swap_group(op)
                       if t.call and "self." not in t.call and self._fits(node, op, t, kind)]
        if targets:
            self.candidates.append((node, op, kind, targets))

    @staticmethod
    def _module_target(op: Op) -> bool:
        return bool(op.module_class) or op.name in ("layer_norm", "rms_norm", "batch_norm",
                                                    "instance_norm")

    def _fits(self, call: cst.Call, old: Op, new: Op, kind: str) -> bool:
        dim = _dim_of(call, old, kind)
        if "{dim}" in new.call and dim is None:
            return False
        keywords = {a.keyword.value for a in call.args if a.keyword is not None}
        carried = keywords - {"dim", "input", "inplace"} - set(old.params)
        if carried - set(new.sig) - {"keepdim"}:
            return False
        if "keepdim" in keywords and "keepdim" not in new.sig:
            return False
        return new.arity == old.arity and (new.group != "loss" or old.group == "loss")

    def choose(self) -> None:
        self.chosen = self.candidates[self.rng.randrange(len(self.candidates))]
        node, op, kind, targets = self.chosen
        new = targets[self.rng.randrange(len(targets))]
        params = {} if kind == "module" else {
            name: spec["choices"][self.rng.randrange(len(spec["choices"]))]
            for name, spec in new.params.items()}
        self.new_op, self.new_params = new, params
        self.params = {"from": op.name, "to": new.name, **params}

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        if self.mode != "rewrite" or self.chosen is None or original_node is not self.chosen[0]:
            return updated_node
        _, old, kind, _ = self.chosen
        new = self.new_op
        if kind == "module":
            return self._swap_module(updated_node, old, new)
        x = _first_arg_code(updated_node, kind)
        if x is None:
            raise Refusal(self.name, f"cannot find the input of {code(original_node.func)}")
        values = {k: repr(v) for k, v in self.new_params.items()}
        dim = _dim_of(updated_node, old, kind)
        if dim is not None:
            values["dim"] = code(dim.value)
        if new.group == "loss":
            return self._swap_loss(updated_node, old, new, kind, values)
        text = new.call.format(x=x, attr="", **values)
        result = cst.parse_expression(text)
        keepdim = _arg(updated_node, "keepdim", None)
        if keepdim is not None and isinstance(result, cst.Call):
            result = _add_kwarg(result, "keepdim", keepdim.value)
        return result

    def _swap_loss(self, call, old, new, kind, values):
        positional = [a for a in call.args if a.keyword is None]
        if len(positional) < 2:
            raise Refusal(self.name, "loss call without a positional target")
        target = code(positional[1].value)
        text = new.call.format(x=code(positional[0].value), target=target, other="", **values)
        return cst.parse_expression(text)

    def _swap_module(self, call: cst.Call, old: Op, new: Op) -> cst.Call:
        keep = [a for a in call.args if a.keyword is not None and a.keyword.value in
                ("dtype", "device", "eps")]
        positional = [a for a in call.args if a.keyword is None]
        if new.module_class and new.group == "pooling":
            if any(a.keyword is not None and a.keyword.value in ("dilation", "return_indices",
                                                                  "count_include_pad", "divisor_override")
                   for a in call.args) or len(positional) > 3:
                raise Refusal(self.name, f"{code(call.func)} has arguments {new.module_class} lacks")
            func = cst.parse_expression(new.module_class)
            args = list(call.args)
        elif new.module_class:
            func = cst.parse_expression(new.module_class)
            args = [a for a in keep if a.keyword.value in ("dtype", "device")]
        else:
            old_name = code(call.func)
            nd = next((s for s in ("1d", "2d", "3d") if old_name.endswith(s)), "2d")
            class_name = {"layer_norm": "nn.LayerNorm", "rms_norm": "nn.RMSNorm",
                          "batch_norm": f"nn.BatchNorm{nd}",
                          "instance_norm": f"nn.InstanceNorm{nd}"}[new.name]
            func = cst.parse_expression(class_name)
            if not positional:
                raise Refusal(self.name, f"{old_name} without positional size")
            size = positional[-1] if old.name == "group_norm" else positional[0]
            args = [size.with_changes(comma=cst.MaybeSentinel.DEFAULT)]
            if new.name == "instance_norm":
                args.append(cst.Arg(cst.Name("True"), keyword=cst.Name("affine")))
            args += keep
        fixed = []
        for i, a in enumerate(args):
            comma = cst.MaybeSentinel.DEFAULT if i == len(args) - 1 else cst.Comma(
                whitespace_after=cst.SimpleWhitespace(" "))
            if a.keyword is not None:
                a = a.with_changes(equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                                         whitespace_after=cst.SimpleWhitespace("")))
            fixed.append(a.with_changes(comma=comma))
        return call.with_changes(func=func, args=fixed)

    def no_candidates(self) -> str:
        return "no op with a compatible replacement in forward or __init__"


# -----------------------------------------------------------------------------------------
def _forward_return(func: cst.FunctionDef) -> tuple[int, cst.Return] | None:
    body = func.body.body
    if not body or not isinstance(body[-1], cst.SimpleStatementLine):
        return None
    stmt = body[-1].body[0]
    if isinstance(stmt, cst.Return) and stmt.value is not None:
        return len(body) - 1, stmt
    return None


class InsertEpilogueMutator(Mutator):
    """Appends one shape-preserving elementwise op (activation, clamp, scale, shift ...) to the
    value ``forward`` returns: ``y = F.gelu(y)`` before ``return y``, or ``return F.gelu(expr)``.

    Refuses when ``forward`` does not end in a single-tensor return (tuples, no return), and when
    every drawn op makes the chain degenerate (a ReLU after a softmax, tanh after huge values ...)."""

    name = "insert_epilogue"
    attempts = 6

    def _options(self) -> list[Op]:
        return [op for op in self.catalog.with_role("epilogue")
                if op.shape == "same" and not op.module and op.arity == 1
                and op.requires not in ("positive", "nonneg")]

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        super().visit_FunctionDef(node)
        if self.mode == "collect" and node.name.value == "forward" and self.in_model:
            found = _forward_return(node)
            if found and not isinstance(found[1].value, (cst.Tuple, cst.List, cst.Dict)):
                self.candidates.append(node)
        return True

    def choose(self) -> None:
        super().choose()
        options = self._options()
        op = options[self.rng.randrange(len(options))]
        params = {name: spec["choices"][self.rng.randrange(len(spec["choices"]))]
                  for name, spec in op.params.items()}
        self.new_op, self.new_params = op, params
        self.params = {"name": op.name, **params}

    def rewrite_function(self, original_node, updated_node):
        if self.mode != "rewrite" or original_node is not self.chosen:
            return updated_node
        index, ret = _forward_return(updated_node)
        values = {k: repr(v) for k, v in self.new_params.items()}
        body = list(updated_node.body.body)
        if isinstance(ret.value, cst.Name):
            var = ret.value.value
            text = self.new_op.call.format(x=var, **values)
            body.insert(index, cst.parse_statement(f"{var} = {text}\n"))
        else:
            text = self.new_op.call.format(x=code(ret.value), **values)
            new_ret = ret.with_changes(value=cst.parse_expression(text))
            body[index] = body[index].with_changes(body=[new_ret])
        return updated_node.with_changes(body=updated_node.body.with_changes(body=body))

    def no_candidates(self) -> str:
        return "forward does not end in a single-tensor return"


# -----------------------------------------------------------------------------------------
class RemoveEpilogueMutator(Mutator):
    """Removes one shape-preserving elementwise op from ``forward``: a statement ``y = op(y)``,
    ``y = self.act(y)`` for an activation module, or the outer call of ``return op(expr)``.

    Refuses when there is no such op, and when the shorter program is degenerate (for instance
    nothing but an identity is left)."""

    name = "remove_epilogue"

    def reset(self, rng):
        super().reset(rng)
        self.module_attrs: dict[str, Op] = {}

    def _removable(self, call: cst.CSTNode) -> Op | None:
        if not isinstance(call, cst.Call):
            return None
        op, kind = self.call_op(call)
        if op is None and isinstance(call.func, cst.Attribute) and isinstance(
                call.func.value, cst.Name) and call.func.value.value == "self":
            op = self.module_attrs.get(call.func.attr.value)
            kind = "module" if op else ""
        if op is None or op.arity != 1 or op.shape != "same" or op.group not in (
                "elementwise", "activation") or op.has_role("merge"):
            return None
        if kind != "method" and not [a for a in call.args if a.keyword is None]:
            return None
        return op

    def visit_Assign(self, node: cst.Assign) -> None:
        if self.mode != "collect":
            return
        if (self.in_init and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Attribute)
                and isinstance(node.value, cst.Call)):
            op, kind = self.call_op(node.value)
            if op is not None and kind == "module":
                self.module_attrs[node.targets[0].target.attr.value] = op
        if self.in_forward and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
            op = self._removable(node.value)
            if op is not None:
                var = node.targets[0].target.value
                inner = self._inner(node.value, op)
                if isinstance(inner, cst.Name) and inner.value == var:
                    self.candidates.append(("assign", node, op))

    def visit_Return(self, node: cst.Return) -> None:
        if self.mode == "collect" and self.in_forward and node.value is not None:
            op = self._removable(node.value)
            if op is not None:
                self.candidates.append(("return", node, op))

    @staticmethod
    def _inner(call: cst.Call, op: Op) -> cst.BaseExpression:
        if isinstance(call.func, cst.Attribute) and not [a for a in call.args if a.keyword is None]:
            return call.func.value
        return [a for a in call.args if a.keyword is None][0].value

    def choose(self) -> None:
        super().choose()
        self.params = {"name": self.chosen[2].name}

    def leave_SimpleStatementLine(self, original_node, updated_node):
        if self.mode != "rewrite" or self.chosen[0] != "assign":
            return updated_node
        if original_node.body and original_node.body[0] is self.chosen[1]:
            return cst.RemoveFromParent()
        return updated_node

    def leave_Return(self, original_node, updated_node):
        if self.mode == "rewrite" and self.chosen[0] == "return" and original_node is self.chosen[1]:
            return updated_node.with_changes(value=self._inner(updated_node.value, self.chosen[2]))
        return updated_node

    def no_candidates(self) -> str:
        return "no removable elementwise op in forward"


# -----------------------------------------------------------------------------------------
def _reduction_signature(trace: Trace | None) -> list:
    if trace is None:
        return []
    return [(n.name, n.x.shape if n.x else None, tuple(n.reduced_dims()))
            for n in trace.forward_nodes]


class ReductionDimMutator(Mutator):
    """Moves the ``dim`` of one reduction, scan, softmax or normalisation call in ``forward`` to
    another axis (literal dims only).

    Refuses when no call has a literal ``dim``, and when every other axis is invalid, degenerate
    (size 1) or the same axis spelled differently (``-1`` vs ``1`` on a rank-2 tensor)."""

    name = "reduction_dim"
    attempts = 5
    needs_original_trace = True
    DIMS = (-1, -2, -3, 0, 1, 2, 3)

    def visit_Call(self, node: cst.Call) -> None:
        if self.mode != "collect" or not self.in_forward:
            return
        op, kind = self.call_op(node)
        if op is None or op.group == "loss":
            return
        dim = _dim_of(node, op, kind) if "dim" in op.sig else _arg(node, "dim", None)
        if dim is not None and _int_value(dim.value) is not None:
            self.candidates.append((node, dim, _int_value(dim.value)))

    def choose(self) -> None:
        super().choose()
        _, _, current = self.chosen
        options = [d for d in self.DIMS if d != current]
        self.new_dim = options[self.rng.randrange(len(options))]
        self.params = {"from": current, "to": self.new_dim}

    def leave_Call(self, original_node, updated_node):
        if self.mode == "rewrite" and original_node is self.chosen[0]:
            dim_arg = self.chosen[1]
            for arg in updated_node.args:
                if (arg.keyword is not None and dim_arg.keyword is not None
                        and arg.keyword.value == dim_arg.keyword.value) or (
                        dim_arg.keyword is None and code(arg) == code(dim_arg)):
                    return _replace_arg(updated_node, arg, _int_node(self.new_dim))
        return updated_node

    def accept(self, original, mutant):
        if _reduction_signature(original) == _reduction_signature(mutant):
            return "the new dim is the same axis"
        return None

    def no_candidates(self) -> str:
        return "no call with a literal dim in forward"


# -----------------------------------------------------------------------------------------
CONV_CLASSES = {f"torch.nn.{c}" for c in ("Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d",
                                           "ConvTranspose2d", "ConvTranspose3d")}
POOL_CLASSES = {f"torch.nn.{c}" for c in ("MaxPool1d", "MaxPool2d", "MaxPool3d", "AvgPool1d",
                                           "AvgPool2d", "AvgPool3d", "LPPool2d")}
POOL_FUNCTIONS = {f"torch.nn.functional.{c}" for c in ("max_pool1d", "max_pool2d", "max_pool3d",
                                                       "avg_pool1d", "avg_pool2d", "avg_pool3d")}


class ConvPoolMutator(Mutator):
    """Changes the kernel size (and with it a 'same' padding, or a pool's stride) of one
    convolution or pooling layer, consistently: a literal argument is rewritten in place, a
    module-level constant (directly or through ``get_init_inputs``) at its definition, so every
    use of it agrees.

    Refuses when there is no conv/pool layer, when its kernel size is not an int literal or
    constant, and when the new geometry breaks the shapes downstream or degenerates."""

    name = "conv_pool_params"
    attempts = 5

    def reset(self, rng):
        super().reset(rng)
        self.constants: dict[str, cst.Assign] = {}
        self.init_params: list[str] = []
        self.init_inputs: list[cst.BaseExpression] = []
        self.edits: dict[int, int] = {}  # id(node of an int literal or Assign) -> new value
        self.edit_nodes: list[cst.CSTNode] = []

    def visit_Assign(self, node: cst.Assign) -> None:
        if (self.mode == "collect" and not self.stack and len(node.targets) == 1
                and isinstance(node.targets[0].target, cst.Name)):
            self.constants[node.targets[0].target.value] = node

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        super().visit_FunctionDef(node)
        if self.mode == "collect" and node.name.value == "__init__" and self.in_model:
            self.init_params = [p.name.value for p in node.params.params][1:]
        if self.mode == "collect" and node.name.value == "get_init_inputs" and len(self.stack) == 1:
            found = _forward_return(node)
            if found and isinstance(found[1].value, (cst.List, cst.Tuple)):
                self.init_inputs = [e.value for e in found[1].value.elements]
        return True

    def visit_Call(self, node: cst.Call) -> None:
        if self.mode != "collect":
            return
        names = self.qualnames(node.func)
        if self.in_init and names & CONV_CLASSES:
            self.candidates.append(("conv", node, sorted(names & CONV_CLASSES)[0]))
        elif self.in_init and names & POOL_CLASSES:
            self.candidates.append(("pool", node, sorted(names & POOL_CLASSES)[0]))
        elif self.in_forward and names & POOL_FUNCTIONS:
            self.candidates.append(("fpool", node, sorted(names & POOL_FUNCTIONS)[0]))

    def _resolve(self, expr: cst.BaseExpression, depth: int = 0,
                 module_scope: bool = False) -> cst.CSTNode | None:
        """The node holding the int value of ``expr``: an Integer, or a constant's Assign.
        A name in ``__init__`` that is one of its parameters is followed through
        ``get_init_inputs`` to the module-level constant (or literal) that feeds it."""
        if isinstance(expr, cst.Integer):
            return expr
        if isinstance(expr, cst.Name) and depth < 3:
            if not module_scope and self.in_init_name(expr.value):
                index = self.init_params.index(expr.value)
                if index < len(self.init_inputs):
                    return self._resolve(self.init_inputs[index], depth + 1, module_scope=True)
                return None
            assign = self.constants.get(expr.value)
            if assign is not None and isinstance(assign.value, cst.Integer):
                return assign
        return None

    def in_init_name(self, name: str) -> bool:
        return name in self.init_params

    @staticmethod
    def _value(holder: cst.CSTNode) -> int:
        return int(holder.value.value) if isinstance(holder, cst.Assign) else int(holder.value)

    def choose(self) -> None:
        order = list(range(len(self.candidates)))
        self.rng.shuffle(order)
        for i in order:
            kind, call, qualname = self.candidates[i]
            offset = 1 if kind == "fpool" else 0
            if kind == "conv":
                k_arg = _arg(call, "kernel_size", 2)
                s_arg = _arg(call, "stride", 3)
                p_arg = _arg(call, "padding", 4)
            else:
                k_arg = _arg(call, "kernel_size", 0 + offset)
                s_arg = _arg(call, "stride", 1 + offset)
                p_arg = _arg(call, "padding", 2 + offset)
            if k_arg is None:
                continue
            k_holder = self._resolve(k_arg.value)
            if k_holder is None:
                continue
            k = self._value(k_holder)
            options = [1, 3, 5, 7] if kind == "conv" else [2, 3, 4]
            options = [o for o in options if o != k]
            new_k = options[self.rng.randrange(len(options))]
            edits = [(k_holder, new_k)]
            params = {"layer": qualname.rsplit(".", 1)[-1], "kernel_size": new_k}
            if p_arg is not None:
                p_holder = self._resolve(p_arg.value)
                if p_holder is not None and self._value(p_holder) == k // 2 and p_holder is not k_holder:
                    edits.append((p_holder, new_k // 2))
                    params["padding"] = new_k // 2
            if kind != "conv" and s_arg is not None:
                s_holder = self._resolve(s_arg.value)
                if s_holder is not None and self._value(s_holder) == k and s_holder is not k_holder:
                    edits.append((s_holder, new_k))
                    params["stride"] = new_k
            if kind != "conv" and p_arg is not None and "padding" not in params:
                p_holder = self._resolve(p_arg.value)
                if p_holder is not None and self._value(p_holder) > new_k // 2:
                    edits.append((p_holder, new_k // 2))
                    params["padding"] = new_k // 2
            self.chosen = self.candidates[i]
            self.edit_nodes = [node for node, _ in edits]
            self.edits = {id(node): value for node, value in edits}
            self.params = params
            return
        raise Refusal(self.name, "no conv/pool layer with an int literal or constant kernel size")

    def _edited(self, original, updated):
        value = self.edits.get(id(original))
        if value is None:
            return updated
        if isinstance(updated, cst.Assign):
            return updated.with_changes(value=cst.Integer(str(value)))
        return updated.with_changes(value=str(value))

    def leave_Integer(self, original_node, updated_node):
        return self._edited(original_node, updated_node) if self.mode == "rewrite" else updated_node

    def leave_Assign(self, original_node, updated_node):
        return self._edited(original_node, updated_node) if self.mode == "rewrite" else updated_node

    def no_candidates(self) -> str:
        return "no convolution or pooling layer"


# -----------------------------------------------------------------------------------------
class InputDistributionMutator(Mutator):
    """Changes how ``get_inputs`` draws one floating-point input: rescales a normal draw
    (``torch.randn(...) * 2.0``), shifts it, or turns it into a symmetric uniform draw
    (``torch.rand(...) * 2 - 1``); a uniform draw becomes signed or normal.

    Refuses when ``get_inputs`` has no ``torch.randn``/``torch.rand`` call, and when the new
    distribution makes the problem degenerate (ReLU fed only non-negative values, saturated
    sigmoid, log of negatives ...)."""

    name = "input_distribution"
    attempts = 5
    TRANSFORMS = {
        "torch.randn": (("scale", "{c} * {s}"), ("shift", "{c} + {t}"),
                        ("uniform", "(torch.rand({args}) * 2 - 1)")),
        "torch.rand": (("signed", "({c} * 2 - 1)"), ("normal", "torch.randn({args})"),
                       ("scale", "{c} * {s}")),
    }

    def visit_Call(self, node: cst.Call) -> None:
        if self.mode == "collect" and self.in_get_inputs:
            names = self.qualnames(node.func) & set(self.TRANSFORMS)
            if names and not any(a.keyword is not None and a.keyword.value == "generator"
                                 for a in node.args):
                self.candidates.append((node, names.pop()))

    def choose(self) -> None:
        super().choose()
        node, qualname = self.chosen
        kind, template = self.TRANSFORMS[qualname][self.rng.randrange(len(self.TRANSFORMS[qualname]))]
        s = [0.25, 0.5, 2.0, 4.0][self.rng.randrange(4)]
        t = [-1.0, -0.5, 0.5, 1.0][self.rng.randrange(4)]
        self.template = template
        self.values = {"s": repr(s), "t": repr(t)}
        self.params = {"input": self.candidates.index(self.chosen), "from": qualname.split(".")[-1],
                       "dist": kind}
        if "{s}" in template:
            self.params["scale"] = s
        if "{t}" in template:
            self.params["shift"] = t

    def leave_Call(self, original_node, updated_node):
        if self.mode != "rewrite" or original_node is not self.chosen[0]:
            return updated_node
        args = code(updated_node).split("(", 1)[1][:-1]
        text = self.template.format(c=code(updated_node), args=args, **self.values)
        return cst.parse_expression(text)

    def no_candidates(self) -> str:
        return "get_inputs has no torch.randn / torch.rand draw"


MUTATORS: tuple[type[Mutator], ...] = (ResizeMutator, DtypeMutator, SwapOpMutator,
                                        InsertEpilogueMutator, RemoveEpilogueMutator,
                                        ReductionDimMutator, ConvPoolMutator,
                                        InputDistributionMutator)


def all_mutators(catalog: Catalog | None = None) -> list[Mutator]:
    return [cls(catalog) for cls in MUTATORS]


def mutate_chain(source: str, mutators: Sequence[Mutator], rng: random.Random) -> Mutation:
    """Apply the first of ``mutators`` (in random order) that does not refuse."""
    order = list(mutators)
    rng.shuffle(order)
    refusals = []
    for mutator in order:
        try:
            return mutator.mutate(source, rng)
        except Refusal as exc:
            refusals.append(str(exc))
    raise Refusal("any", "; ".join(refusals))
