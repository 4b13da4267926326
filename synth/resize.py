"""Scale a problem's module-level size constants, keeping the source valid and its formatting.

A KernelBench-format problem states its sizes as module-level UPPER_CASE integer constants that
``get_inputs`` / ``get_init_inputs`` use::

    BATCH = 4096   # rows
    VOCAB = 8192

``resize_source`` rewrites those literals (libcst, so comments and layout survive) by a factor, or
to the factor whose largest tensor has at most ``target_numel`` elements. What it scales, and how:

* Only *large* size constants: an ``int`` literal (or a literal-only expression such as
  ``2 ** 20``) assigned once at module level, used by the code (``get_inputs``,
  ``get_init_inputs``, the model; directly or through derived constants), greater than 8, and
  not protected. Protected constants are never changed: names that say kernel,
  stride, padding, dilation, heads, groups, experts, top-k, ...; constants used as a divisor
  (``//``, ``%``, ``/``); constants passed as ``kernel_size=``, ``stride=``, ``num_heads=``, ...
* Rounding keeps divisibility: a scaled value stays a multiple of 8 when it was one, and of every
  divisor-like constant (heads, groups, strides, patch sizes, any constant used as a divisor) that
  divided it. A scaled value never drops below 8, nor below any kernel size (a named constant
  or a literal in a convolution/pooling call), so windows and a few stride-2 stages still fit.
* Afterwards every ``X // Y``, ``X % Y`` and ``X / Y`` over module constants that divided exactly
  before must still divide exactly, and derived constants (``HIDDEN = 4 * DIM``) must stay positive
  and divisible as before; constants feeding a broken relation are frozen and the rest rescaled.

The size that ``target_numel`` and ``shrink_for_cpu`` aim at is the largest tensor that the source
makes visible statically: each tensor that ``get_inputs`` returns (shapes read from
``torch.randn(...)`` and friends without running anything), and, as a stand-in for the weights,
the product of the scalable sizes that ``get_init_inputs`` returns (in x out for a linear layer,
in1 x in2 x out for a bilinear one; heads, groups and kernel sizes do not count). Sources are
never executed, so untrusted (generated) sources can be resized safely.

``resize_source`` raises ``ResizeError`` with the reason when nothing can be resized.
"""
from __future__ import annotations

import ast
import math
import operator
import re
from dataclasses import dataclass, field

import libcst as cst
from kernelmill.core.errors import KernelmillError
from kernelmill.core.problem import parse

__all__ = ["ResizeError", "ResizeResult", "resize_source", "shrink_for_cpu", "size_constants",
           "largest_numel", "size_plans", "CPU_MAX_NUMEL"]

CPU_MAX_NUMEL = 256 * 1024
SMALL = 8  # constants at or below this are never scaled (kernel sizes, counts, axes)

_UPPER = re.compile(r"^[A-Z][A-Z0-9_]*$")
# name tokens (split on "_") that mark a constant as structural, never to be scaled
_PROTECTED_TOKENS = {
    "KERNEL", "KSIZE", "KS", "STRIDE", "STRIDES", "PAD", "PADDING", "DILATION", "DIL",
    "HEAD", "HEADS", "NHEAD", "NHEADS", "GROUP", "GROUPS", "EXPERT", "EXPERTS", "TOPK", "TOP",
    "PATCH", "WINDOW", "POOL", "UPSCALE", "SCALE", "FACTOR", "SEED", "MARGIN", "TEMP",
    "TEMPERATURE", "CLAMP", "THRESHOLD", "ALPHA", "BETA", "ITERS", "ITERATIONS", "LAYERS",
    "CHUNK", "BLOCK", "OUTPUT_PADDING", "AXIS", "VALUE", "IGNORE", "EPS",
}
# tokens of protected constants that other sizes must stay divisible by
_DIVISOR_TOKENS = {"HEADS", "NHEAD", "NHEADS", "GROUPS", "EXPERTS", "STRIDE", "STRIDES", "PATCH",
                   "WINDOW", "POOL", "UPSCALE", "FACTOR", "CHUNK", "BLOCK"}
_KERNEL_TOKENS = {"KERNEL", "KSIZE", "KS", "POOL", "WINDOW", "PATCH"}
_PROTECTED_KEYWORDS = {"kernel_size", "stride", "padding", "dilation", "output_padding",
                       "num_heads", "num_groups", "groups", "k", "upscale_factor",
                       "downscale_factor", "scale_factor", "ignore_index", "padding_idx"}
_DIVISOR_KEYWORDS = {"stride", "num_heads", "num_groups", "groups", "upscale_factor",
                     "downscale_factor"}
_KERNEL_KEYWORDS = {"kernel_size"}

_SHAPE_FACTORIES = {"randn", "rand", "zeros", "ones", "empty", "normal"}
_SAME_AS_FIRST = {"randn_like", "rand_like", "zeros_like", "ones_like", "empty_like",
                  "full_like", "randint_like", "clone"}


class ResizeError(KernelmillError):
    """A source whose sizes cannot be changed; ``reason`` says why."""

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(f"cannot resize: {reason}")


@dataclass
class ResizeResult:
    """The rewritten source, the factor applied and each changed constant as (old, new)."""

    source: str
    factor: float
    changes: dict[str, tuple[int, int]] = field(default_factory=dict)
    numel_before: int | None = None  # largest static tensor estimate, before and after
    numel_after: int | None = None


# ---------------------------------------------------------------------------- static analysis

class _Unknown:
    """A value the static evaluator cannot compute; remembers which constants it came from."""

    def __init__(self, refs: frozenset[str] = frozenset()):
        self.refs = refs


@dataclass
class _Tensor:
    numel: int


_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Div: operator.truediv,
           ast.Pow: operator.pow}


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _literal_int(node: ast.AST) -> int | None:
    """Value of an int literal or literal-only arithmetic (``2 ** 20``), else None."""
    if _names(node) or any(isinstance(n, ast.Call) for n in ast.walk(node)):
        return None
    try:
        value = _eval_number(node, {})
    except Exception:
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _eval_number(node: ast.AST, env: dict):
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    if isinstance(node, ast.Name):
        return env[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _eval_number(node.operand, env)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left, right = _eval_number(node.left, env), _eval_number(node.right, env)
        if isinstance(node.op, ast.Pow) and abs(right) > 64:
            raise ValueError("exponent too large")
        return _BINOPS[type(node.op)](left, right)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        args = [_eval_number(a, env) for a in node.args]
        fn = {"int": int, "min": min, "max": max, "abs": abs, "round": round}.get(node.func.id)
        if fn is not None and args:
            return fn(*args)
    raise ValueError("not a number")


_SQRT_CALLS = {"sqrt", "rsqrt"}


def _normalizer(node: ast.AST) -> bool:
    """A true division's right side that only scales values, not a size relation: a root or a
    fractional power of constants (``K ** 0.5``, ``math.sqrt(K)``). Treating its constants as
    divisors froze them (and every size they divided) at full size: an fp16 einsum problem
    with ``/ K ** 0.5`` kept 134 M elements after "shrinking" and timed out on CPU."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
        exponent = node.right
        if isinstance(exponent, ast.UnaryOp) and isinstance(exponent.op, ast.USub):
            exponent = exponent.operand
        return isinstance(exponent, ast.Constant) and isinstance(exponent.value, float) \
            and not float(exponent.value).is_integer()
    if isinstance(node, ast.Call):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else \
            func.id if isinstance(func, ast.Name) else None
        return name in _SQRT_CALLS
    return False


def _token_set(name: str) -> set[str]:
    tokens = set(name.split("_"))
    tokens.add(name)
    return tokens


@dataclass
class _Analysis:
    tree: ast.Module
    literals: dict[str, int]               # module-level int literals (assigned once)
    derived: dict[str, ast.AST]            # module-level constants computed from others
    order: list[str]                       # module-level assignment order
    scalable: list[str]
    skipped: dict[str, str]                # constant -> why it is not scaled
    divisors: dict[str, set[str] | None]   # divisor -> the constants it constrains (None: all)
    kernel_floor: int
    relations: list[tuple[ast.AST, ast.AST]]  # (X, Y) of X // Y, X % Y, X / Y over constants


def _top_function(tree: ast.Module, name: str) -> ast.FunctionDef | None:
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    return None


def _related(tree: ast.Module, divisor: str) -> set[str] | None:
    """Constants that share a statement with ``divisor`` (None: it is used inside the model).

    A size only has to stay divisible by a heads/groups constant it travels with: the
    constructor's arguments, a derived constant, an arithmetic expression in ``get_inputs``
    (``DIM // HEADS``). Sitting side by side in one shape (``randn(BATCH, HEADS, ...)``) or
    ``BATCH = 32`` next to ``GROUPS = 32`` is a coincidence that must not stop a size shrinking.
    """
    related: set[str] = set()
    simple = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Return, ast.Expr)
    for node in tree.body:
        if divisor not in _names(node):
            continue
        if isinstance(node, simple):
            related |= _names(node)
        elif isinstance(node, ast.FunctionDef) and node.name == "get_init_inputs":
            for stmt in ast.walk(node):
                if isinstance(stmt, simple) and divisor in _names(stmt):
                    related |= _names(stmt)
        elif isinstance(node, ast.FunctionDef) and node.name == "get_inputs":
            for expr in ast.walk(node):
                if isinstance(expr, ast.BinOp) and divisor in _names(expr):
                    related |= _names(expr)
        else:
            return None
    return related


def _divisors_of(analysis: "_Analysis", name: str, env: dict) -> list[int]:
    """Values of the divisor constants that ``name`` has to stay divisible by (if it was)."""
    values = []
    for divisor, related in analysis.divisors.items():
        value = env.get(divisor)
        if divisor != name and isinstance(value, int) and value > 1 \
                and (related is None or name in related):
            values.append(value)
    return values


_WINDOW_ARG = re.compile(r"^(?:(Conv(?:Transpose)?[123]d)|((?:Max|Avg)Pool[123]d)|(LPPool[123]d)|"
                         r"((?:max|avg)_pool[123]d|conv(?:_transpose)?[123]d))$")


def _literal_window(tree: ast.Module) -> int:
    """Largest literal kernel size passed to a convolution or pooling call (1 if none)."""
    largest = 1
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        match = _WINDOW_ARG.match(_call_name(node.func))
        if not match:
            continue
        # where kernel_size sits positionally: nn.Conv*(in, out, k), nn.*Pool(k),
        # nn.LPPool(p, k), F.max_pool*(x, k); F.conv*(x, weight) takes no literal size
        index = {1: 2, 2: 0, 3: 1, 4: 1}[match.lastindex]
        candidates = [k.value for k in node.keywords if k.arg == "kernel_size"]
        functional = match.group(4) or ""
        if len(node.args) > index and not functional.startswith("conv"):
            candidates.append(node.args[index])
        for candidate in candidates:
            for leaf in ast.walk(candidate):
                if isinstance(leaf, ast.Constant) and isinstance(leaf.value, int) \
                        and not isinstance(leaf.value, bool):
                    largest = max(largest, leaf.value)
    return largest


def _analyze(source: str) -> _Analysis:
    try:
        tree = parse(source)
    except SyntaxError as exc:
        raise ResizeError(f"source does not parse (line {exc.lineno}: {exc.msg})") from None

    literals: dict[str, int] = {}
    derived: dict[str, ast.AST] = {}
    order: list[str] = []
    counts: dict[str, int] = {}
    for node in tree.body:
        targets, value = [], None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            counts[node.target.id] = counts.get(node.target.id, 0) + 2
            continue
        for target in targets:
            for name_node in ast.walk(target):
                if isinstance(name_node, ast.Name):
                    counts[name_node.id] = counts.get(name_node.id, 0) + 1
        if len(targets) == 1 and isinstance(targets[0], ast.Name):
            name = targets[0].id
            order.append(name)
            literal = _literal_int(value)
            if literal is not None:
                literals[name] = literal
                derived.pop(name, None)
            else:
                derived[name] = value
                literals.pop(name, None)

    # constants the code uses (input builders, the model), following derived constants
    roots: set[str] = set()
    for node in tree.body:
        if not isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            roots |= _names(node)
    reachable: set[str] = set()
    stack = list(roots)
    while stack:
        name = stack.pop()
        if name in reachable:
            continue
        reachable.add(name)
        if name in derived:
            stack.extend(_names(derived[name]))

    divisor_used: set[str] = set()
    keyword_used: dict[str, str] = {}
    relations: list[tuple[ast.AST, ast.AST]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.FloorDiv, ast.Mod, ast.Div)):
            if isinstance(node.op, ast.Div) and _normalizer(node.right):
                continue  # ``x / K ** 0.5`` scales values; any K keeps it valid
            divisor_used |= _names(node.right)
            relations.append((node.left, node.right))
        elif isinstance(node, ast.keyword) and node.arg in _PROTECTED_KEYWORDS:
            for name in _names(node.value):
                keyword_used.setdefault(name, node.arg)

    skipped: dict[str, str] = {}
    scalable: list[str] = []
    for name in order:
        if name not in literals or name in scalable or name in skipped:
            continue
        value = literals[name]
        tokens = _token_set(name)
        if not _UPPER.match(name):
            skipped[name] = "not an UPPER_CASE name"
        elif counts.get(name, 0) > 1:
            skipped[name] = "assigned more than once"
        elif name not in reachable:
            skipped[name] = "not used by the model or its input builders"
        elif value <= SMALL:
            skipped[name] = f"small constant (<= {SMALL})"
        elif tokens & _PROTECTED_TOKENS:
            skipped[name] = "structural name (kernel/stride/heads/groups/...)"
        elif name in divisor_used:
            skipped[name] = "used as a divisor"
        elif name in keyword_used:
            skipped[name] = f"passed as {keyword_used[name]}="
        else:
            scalable.append(name)

    divisors: dict[str, set[str] | None] = {}
    kernel_floor = 1
    for name in [*literals, *derived]:
        if name in scalable:
            continue
        tokens = _token_set(name)
        if name in divisor_used or tokens & _DIVISOR_TOKENS \
                or keyword_used.get(name) in _DIVISOR_KEYWORDS:
            divisors[name] = _related(tree, name)
        if name in literals and (tokens & _KERNEL_TOKENS
                                 or keyword_used.get(name) in _KERNEL_KEYWORDS):
            kernel_floor = max(kernel_floor, literals[name])
    kernel_floor = max(kernel_floor, _literal_window(tree))
    return _Analysis(tree, literals, derived, order, scalable, skipped, divisors, kernel_floor,
                     relations)


def _environment(analysis: _Analysis, values: dict[str, int]) -> dict:
    """Module constants with ``values`` overriding literals; derived ones recomputed."""
    env: dict = {}
    for name in analysis.order:
        if name in analysis.literals:
            env[name] = values.get(name, analysis.literals[name])
        elif name in analysis.derived:
            try:
                env[name] = _eval_number(analysis.derived[name], env)
            except Exception:
                env.pop(name, None)
    return env


# ------------------------------------------------------------ static tensor-size estimation

def _call_name(func: ast.AST) -> str:
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return ""


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


def size_constants(source: str) -> tuple[dict[str, int], dict[str, str]]:
    """(constants that resizing scales -> value, other int constants -> why they are kept)."""
    analysis = _analyze(source)
    return ({n: analysis.literals[n] for n in analysis.scalable}, dict(analysis.skipped))


# --------------------------------------------------------------------------------- scaling

def _lcm(values) -> int:
    result = 1
    for v in values:
        result = result * v // math.gcd(result, v)
    return result


def _scaled_values(analysis: _Analysis, names: list[str], factor: float,
                   min_size: int) -> dict[str, int]:
    env = _environment(analysis, {})
    values: dict[str, int] = {}
    for name in names:
        old = analysis.literals[name]
        multiple = _lcm([8] * (old % 8 == 0)
                        + [d for d in _divisors_of(analysis, name, env) if old % d == 0])
        floor = max(min_size, analysis.kernel_floor, SMALL)
        floor = multiple * math.ceil(floor / multiple)
        new = multiple * round(old * factor / multiple)
        new = max(new, min(floor, old))  # a constant already under the floor is not shrunk
        values[name] = new
    return values


def _broken(analysis: _Analysis, values: dict[str, int]) -> set[str]:
    """Scaled constants that feed a divisibility or positivity relation the new values break."""
    old_env = _environment(analysis, {})
    new_env = _environment(analysis, values)
    bad: set[str] = set()

    def deps(node_or_name) -> set[str]:
        names = {node_or_name} if isinstance(node_or_name, str) else _names(node_or_name)
        seen: set[str] = set()
        stack = list(names)
        while stack:
            name = stack.pop()
            if name in seen:
                continue
            seen.add(name)
            if name in analysis.derived:
                stack.extend(_names(analysis.derived[name]))
        return seen & set(values)

    for left, right in analysis.relations:
        try:
            old_l, old_r = _eval_number(left, old_env), _eval_number(right, old_env)
            new_l, new_r = _eval_number(left, new_env), _eval_number(right, new_env)
        except Exception:
            continue
        if not all(isinstance(v, int) for v in (old_l, old_r, new_l, new_r)) or not old_r:
            continue
        if new_r == 0 or (old_l % old_r == 0 and new_l % new_r != 0) \
                or (old_l // old_r > 0 and new_l // new_r <= 0):
            bad |= deps(left) | deps(right)
    for name in analysis.derived:
        old, new = old_env.get(name), new_env.get(name)
        if not isinstance(old, int) or not isinstance(new, int) or isinstance(old, bool):
            continue
        divisor_values = _divisors_of(analysis, name, old_env) if name not in analysis.divisors \
            else []
        if (old > 0 and new <= 0) or any(old % d == 0 and new % d != 0 for d in divisor_values):
            bad |= deps(name)
    return bad


def _plan(analysis: _Analysis, factor: float, min_size: int) -> dict[str, int]:
    names = list(analysis.scalable)
    while names:
        values = _scaled_values(analysis, names, factor, min_size)
        bad = _broken(analysis, values)
        if not bad:
            return values
        names = [n for n in names if n not in bad]
    return {}


class _ResizeConstants(cst.CSTTransformer):
    """Rewrites the value of module-level ``NAME = <int>`` assignments named in ``values``."""

    def __init__(self, values: dict[str, int]):
        super().__init__()
        self.values = values

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False

    def _literal(self, old: cst.BaseExpression, new: int) -> cst.Integer:
        text = f"{new:_}" if isinstance(old, cst.Integer) and "_" in old.value else str(new)
        return cst.Integer(value=text)

    def leave_Assign(self, original: cst.Assign, updated: cst.Assign) -> cst.Assign:
        if len(updated.targets) == 1 and isinstance(updated.targets[0].target, cst.Name):
            name = updated.targets[0].target.value
            if name in self.values:
                return updated.with_changes(value=self._literal(updated.value, self.values[name]))
        return updated

    def leave_AnnAssign(self, original: cst.AnnAssign, updated: cst.AnnAssign) -> cst.AnnAssign:
        if isinstance(updated.target, cst.Name) and updated.value is not None:
            name = updated.target.value
            if name in self.values:
                return updated.with_changes(value=self._literal(updated.value, self.values[name]))
        return updated


def _render(source: str, values: dict[str, int]) -> str:
    module = cst.parse_module(source)
    return module.visit(_ResizeConstants(values)).code


def _refusal(analysis: _Analysis) -> ResizeError:
    if not analysis.skipped:
        return ResizeError("no module-level UPPER_CASE int size constants")
    kept = ", ".join(f"{n} ({why})" for n, why in analysis.skipped.items())
    return ResizeError(f"no scalable size constant; kept: {kept}")


def _search_factor(analysis: _Analysis, target: int, min_size: int) -> float:
    """Largest factor whose largest tensor estimate is at most ``target`` (or the smallest)."""
    def size(f: float) -> int:
        return _largest(analysis, _plan(analysis, f, min_size)) or 0

    lo, hi = math.log(1e-6), math.log(1e6)
    if size(math.exp(lo)) > target:
        return math.exp(lo)
    for _ in range(50):
        mid = (lo + hi) / 2
        if size(math.exp(mid)) <= target:
            lo = mid
        else:
            hi = mid
    return math.exp(lo)


def resize_source(source: str, *, factor: float | None = None, target_numel: int | None = None,
                  min_size: int = 1) -> ResizeResult:
    """Scale ``source``'s size constants by ``factor`` or towards ``target_numel``.

    With ``target_numel`` the factor is the largest one whose largest tensor (static estimate)
    has at most ``target_numel`` elements; when even the smallest sizes exceed it, the smallest
    sizes are used. ``min_size`` raises the least value a scaled constant may take above the
    built-in floor (8, or the largest kernel size; a constant already below it is not shrunk).
    Raises ``ResizeError`` when the source has no size constant that can be scaled.
    """
    if (factor is None) == (target_numel is None):
        raise ResizeError("give exactly one of factor and target_numel")
    if factor is not None and not (factor > 0 and math.isfinite(factor)):
        raise ResizeError(f"factor must be a positive number, got {factor!r}")
    if target_numel is not None and target_numel < 1:
        raise ResizeError(f"target_numel must be positive, got {target_numel!r}")
    if min_size < 1:
        raise ResizeError(f"min_size must be at least 1, got {min_size!r}")
    analysis = _analyze(source)
    if not analysis.scalable:
        raise _refusal(analysis)
    before = _largest(analysis, {})
    if target_numel is not None:
        if before is None:
            raise ResizeError("cannot tell the input sizes statically from get_inputs()")
        factor = _search_factor(analysis, target_numel, min_size)
    values = _plan(analysis, factor, min_size)
    if not values:
        raise ResizeError("every size constant feeds a divisibility relation that resizing "
                          "would break")
    changes = {n: (analysis.literals[n], v) for n, v in values.items()
               if v != analysis.literals[n]}
    new_source = _render(source, {n: new for n, (_, new) in changes.items()}) if changes \
        else source
    return ResizeResult(source=new_source, factor=float(factor), changes=changes,
                        numel_before=before, numel_after=_largest(analysis, values))


def size_plans(source: str, factors, *, min_size: int = 1) -> list[tuple[float, dict[str, int]]]:
    """(factor, the size constants' values ``resize_source(factor=...)`` would write) for each
    factor, without rewriting the source: a caller that measures each size (mining's sizing
    ladder) overrides the constants in one namespace, then renders only the factor it picks."""
    analysis = _analyze(source)
    if not analysis.scalable:
        raise _refusal(analysis)
    plans = []
    for factor in factors:
        values = _plan(analysis, float(factor), min_size)
        if values:
            plans.append((float(factor), values))
    return plans


def shrink_for_cpu(source: str, max_numel: int = CPU_MAX_NUMEL, *,
                   min_size: int = 1) -> ResizeResult:
    """Shrink a problem so its largest tensor has at most about ``max_numel`` elements.

    Sources that are already small enough come back unchanged (factor 1.0). Raises
    ``ResizeError`` only when the source is too large and nothing in it can be scaled.
    """
    analysis = _analyze(source)
    before = _largest(analysis, {})
    if before is not None and before <= max_numel:
        return ResizeResult(source=source, factor=1.0, changes={}, numel_before=before,
                            numel_after=before)
    if not analysis.scalable:
        raise _refusal(analysis)
    if before is None:
        raise ResizeError("cannot tell the input sizes statically from get_inputs()")
    factor = _search_factor(analysis, max_numel, min_size)
    factor = min(factor, 1.0)
    return resize_source(source, factor=factor, min_size=min_size)
