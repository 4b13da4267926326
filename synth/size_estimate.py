"""Static tensor-size estimation: the largest tensor a problem's source makes visible, read
without running anything, so untrusted (generated) sources can be sized safely.

The estimate covers each tensor that ``get_inputs`` returns (shapes read from ``torch.randn(...)``
and friends) and, as a stand-in for the weights, the product of the scalable sizes that
``get_init_inputs`` returns (in x out for a linear layer, in1 x in2 x out for a bilinear one;
heads, groups and kernel sizes do not count). The constants come from synth/size_analysis.py.
"""
from __future__ import annotations

import ast
import math
from dataclasses import dataclass

from .size_analysis import (
    _BINOPS,
    SMALL,
    _Analysis,
    _analyze,
    _call_name,
    _environment,
    _eval_number,
    _names,
    _top_function,
)

_SHAPE_FACTORIES = {"randn", "rand", "zeros", "ones", "empty", "normal"}
_SAME_AS_FIRST = {"randn_like", "rand_like", "zeros_like", "ones_like", "empty_like",
                  "full_like", "randint_like", "clone"}


class _Unknown:
    """A value the static evaluator cannot compute; remembers which constants it came from."""

    def __init__(self, refs: frozenset[str] = frozenset()):
        self.refs = refs


@dataclass
class _Tensor:
    numel: int


def _shape_numel(values: list) -> int | None:
    if len(values) == 1 and isinstance(values[0], (tuple, list)):
        values = list(values[0])
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return None
    return math.prod(values) if values else 1


class _InputEvaluator:
    """Evaluates an input builder far enough to know the size of each tensor it returns."""

    def __init__(self, env: dict, sizes: dict[str, int]):
        self.env = env
        self.sizes = sizes  # constants whose product stands in for an unknown tensor's size

    def fallback(self, value) -> int | None:
        if isinstance(value, _Tensor):
            return value.numel
        if isinstance(value, _Unknown) and value.refs:
            return math.prod(self.sizes.get(n, 1) for n in value.refs)
        return None

    def ev(self, node: ast.AST, local: dict):
        try:
            return self._ev(node, local)
        except Exception:
            return _Unknown(frozenset(self._refs(node, local)))

    def _refs(self, node: ast.AST, local: dict) -> set[str]:
        refs: set[str] = set()
        for name in _names(node):
            value = local.get(name)
            if isinstance(value, _Unknown):
                refs |= value.refs
            elif name in self.sizes:
                refs.add(name)
        return refs

    def _ev(self, node: ast.AST, local: dict):
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id in local:
                return local[node.id]
            if node.id in self.env:
                return self.env[node.id]
            return _Unknown(frozenset(self._refs(node, local)))
        if isinstance(node, (ast.Tuple, ast.List)):
            return tuple(self.ev(e, local) for e in node.elts)
        if isinstance(node, ast.UnaryOp):
            operand = self.ev(node.operand, local)
            if isinstance(operand, _Tensor):
                return operand
            return _eval_number(ast.UnaryOp(op=node.op, operand=ast.Constant(operand)), {})
        if isinstance(node, ast.BinOp):
            left, right = self.ev(node.left, local), self.ev(node.right, local)
            tensors = [v for v in (left, right) if isinstance(v, _Tensor)]
            if tensors:
                return _Tensor(max(t.numel for t in tensors))
            if isinstance(left, (int, float)) and isinstance(right, (int, float)):
                return _BINOPS[type(node.op)](left, right)
            return _Unknown(frozenset(self._refs(node, local)))
        if isinstance(node, ast.Subscript):
            value = self.ev(node.value, local)
            if isinstance(value, tuple):
                index = self.ev(node.slice, local)
                return value[index] if isinstance(index, int) else _Unknown()
            return value if isinstance(value, _Tensor) else _Unknown(
                frozenset(self._refs(node, local)))
        if isinstance(node, ast.Call):
            return self._call(node, local)
        return _Unknown(frozenset(self._refs(node, local)))

    def _call(self, node: ast.Call, local: dict):
        name = _call_name(node.func)
        args = [self.ev(a, local) for a in node.args if not isinstance(a, ast.Starred)]
        kwargs = {k.arg: self.ev(k.value, local) for k in node.keywords if k.arg}
        owner = self.ev(node.func.value, local) if isinstance(node.func, ast.Attribute) else None
        if isinstance(owner, _Tensor):  # a method on a tensor
            if name in ("view", "reshape", "expand", "new_empty", "new_zeros", "new_ones"):
                numel = _shape_numel([a for a in args if not (isinstance(a, int) and a == -1)])
                return _Tensor(numel if numel and -1 not in args else owner.numel)
            if name == "repeat":
                numel = _shape_numel(args)
                return _Tensor(owner.numel * (numel or 1))
            return _Tensor(owner.numel)
        if name in _SHAPE_FACTORIES and not (name == "normal" and len(args) < 3):
            shape = args if name != "normal" else args[2:]
            numel = _shape_numel(list(shape)) if shape else None
            if numel is None and "size" in kwargs:
                numel = _shape_numel([kwargs["size"]])
            if numel is not None:
                return _Tensor(numel)
        if name == "randint":
            size = kwargs.get("size", args[-1] if args else None)
            numel = _shape_numel([size]) if isinstance(size, tuple) else None
            if numel is not None:
                return _Tensor(numel)
        if name == "full" and args:
            numel = _shape_numel([args[0]])
            if numel is not None:
                return _Tensor(numel)
        if name in ("arange", "randperm", "linspace") and args:
            numbers = [a for a in args if isinstance(a, (int, float))]
            if name == "arange" and numbers:
                start, end = (0, numbers[0]) if len(numbers) == 1 else numbers[:2]
                step = numbers[2] if len(numbers) > 2 else 1
                return _Tensor(max(1, math.ceil((end - start) / step)))
            if name == "randperm" and numbers:
                return _Tensor(int(numbers[0]))
            if name == "linspace" and len(numbers) >= 3:
                return _Tensor(int(numbers[2]))
        if name in _SAME_AS_FIRST and args and isinstance(args[0], _Tensor):
            return args[0]
        if name in ("int", "min", "max", "abs", "round") and args and all(
                isinstance(a, (int, float)) for a in args):
            return {"int": int, "min": min, "max": max, "abs": abs, "round": round}[name](*args)
        tensors = [v for v in [*args, *kwargs.values()] if isinstance(v, _Tensor)]
        if tensors:  # torch.softmax(x, -1), F.normalize(x), x.to(...): same size as its input
            return _Tensor(max(t.numel for t in tensors))
        return _Unknown(frozenset(self._refs(node, local)))

    def run(self, fn: ast.FunctionDef) -> list:
        self.returned_nodes: list[ast.AST] | None = None
        local: dict = {}
        returned: list = []
        for stmt in fn.body:
            if isinstance(stmt, ast.Assign):
                value = self.ev(stmt.value, local)
                for target in stmt.targets:
                    if isinstance(target, ast.Name):
                        local[target.id] = value
                    else:
                        for name in _names(target):
                            local[name] = _Unknown(frozenset(self._refs(stmt.value, local)))
            elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) \
                    and stmt.value is not None:
                local[stmt.target.id] = self.ev(stmt.value, local)
            elif isinstance(stmt, ast.Return) and stmt.value is not None:
                value = self.ev(stmt.value, local)
                returned = list(value) if isinstance(value, tuple) else [value]
                if isinstance(stmt.value, (ast.List, ast.Tuple)):
                    self.returned_nodes = list(stmt.value.elts)
                break
            elif not isinstance(stmt, (ast.Expr, ast.Pass)):
                # loops, branches: fall back to the constants each later name came from
                for node in ast.walk(stmt):
                    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                        local[node.id] = _Unknown(frozenset(self._refs(stmt, local)))
        return returned


def _depends_on(analysis: _Analysis, node: ast.AST, names) -> bool:
    """Whether ``node`` uses one of ``names``, directly or through derived constants."""
    seen: set[str] = set()
    stack = list(_names(node))
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in analysis.derived:
            stack.extend(_names(analysis.derived[name]))
    return bool(seen & set(names))


def _largest(analysis: _Analysis, values: dict[str, int]) -> int | None:
    env = _environment(analysis, values)
    sizes = {n: v for n, v in env.items() if isinstance(v, int) and v > 1
             and (n in analysis.scalable or n in analysis.derived)}
    evaluator = _InputEvaluator(env, sizes)
    candidates: list[int] = []
    fn = _top_function(analysis.tree, "get_inputs")
    if fn is not None:
        for value in evaluator.run(fn):
            numel = evaluator.fallback(value)
            if numel is not None:
                candidates.append(int(numel))
    fn = _top_function(analysis.tree, "get_init_inputs")
    if fn is not None:
        values = evaluator.run(fn)
        nodes = evaluator.returned_nodes
        sized = [True] * len(values) if nodes is None or len(nodes) != len(values) \
            else [_depends_on(analysis, node, analysis.scalable) for node in nodes]
        ints = [int(v) for v, is_size in zip(values, sized) if is_size
                and isinstance(v, int) and not isinstance(v, bool) and v > SMALL]
        if ints:
            candidates.append(math.prod(ints))
    return max(candidates) if candidates else None


def largest_numel(source: str) -> int | None:
    """Static estimate of the largest tensor a problem makes (see the module docstring)."""
    analysis = _analyze(source)
    return _largest(analysis, {})
