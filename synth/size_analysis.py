"""The static analysis of a problem's module-level int constants that resizing works from: which
are size constants that can be scaled (and why each other one is kept), which divisors and
relations they have to keep, the smallest size a kernel window needs (synth/resize.py's module
docstring states the rules). Nothing in the source is executed.
"""
from __future__ import annotations

import ast
import operator
import re
from dataclasses import dataclass

from kernelmill.core.errors import KernelmillError
from kernelmill.core.problem import parse

SMALL = 8  # constants at or below this are never scaled (kernel sizes, counts, axes)

# a size constant's name: upper case as the project writes them (``BATCH``) or lower case as
# KernelBench writes them today (``batch_size``, ``dim1``); a leading underscore marks a private
# helper, not a size
_SIZE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
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


class ResizeError(KernelmillError):
    """A source whose sizes cannot be changed; ``reason`` says why."""

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(f"cannot resize: {reason}")



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
    """The name's ``_``-separated parts and itself, upper-cased (``kernel_size`` is as
    structural as ``KERNEL_SIZE``)."""
    name = name.upper()
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
        if not _SIZE_NAME.match(name):
            skipped[name] = "a private name"
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


def _call_name(func: ast.AST) -> str:
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return ""


def size_constants(source: str) -> tuple[dict[str, int], dict[str, str]]:
    """(constants that resizing scales -> value, other int constants -> why they are kept)."""
    analysis = _analyze(source)
    return ({n: analysis.literals[n] for n in analysis.scalable}, dict(analysis.skipped))
