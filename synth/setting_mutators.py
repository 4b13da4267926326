"""Mutators that keep ``forward``'s ops and change the problem's settings: its sizes, its dtype, the
kernel size of a convolution or pooling layer, the distribution ``get_inputs`` draws from (the
framework: synth/mutator_base.py).
"""
from __future__ import annotations

import random
from typing import Any

import libcst as cst

from .catalog import Op
from .mutator_base import (
    Mutator,
    Refusal,
    _add_kwarg,
    _arg,
    _forward_return,
    _replace_arg,
    code,
)
from .resize import ResizeError, resize_source


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
