"""Mutators that change which ops ``forward`` runs: swap one op for a compatible one, insert or
remove an elementwise epilogue, move a reduction's ``dim`` (the framework: synth/mutator_base.py).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from .catalog import Op
from .mutator_base import (
    Mutator,
    Refusal,
    _add_kwarg,
    _arg,
    _forward_return,
    _int_node,
    _int_value,
    _replace_arg,
    code,
)

if TYPE_CHECKING:
    from .trace import Trace


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
