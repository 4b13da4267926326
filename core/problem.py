"""Read and statically check KernelBench-format problem and candidate sources.

A problem defines ``Model`` (an ``nn.Module``), ``get_inputs()`` and ``get_init_inputs()``; a
candidate defines ``ModelNew`` with the same constructor and forward signature. The module
docstring carries a one-line description and ``category:`` / ``level:`` lines::

    \"\"\"Row softmax over a wide vocabulary dimension.

    category: attention
    level: 1
    \"\"\"

Static checks say exactly what is wrong, with file and line, and never import the source.
"""
from __future__ import annotations

import ast
import re
import threading
from dataclasses import dataclass
from pathlib import Path

from .errors import ProblemError

CATEGORIES = ("elementwise", "activation", "reduction", "normalization", "matmul", "convolution",
              "pooling", "attention", "loss", "fused", "block", "other")

_CATEGORY_HINTS = (  # first match wins; used only when a source does not declare its category
    ("attention", ("attention", "softmax", "sdpa")),
    ("loss", ("loss", "entropy", "nll", "kl_div", "hinge", "margin")),
    ("normalization", ("norm",)),
    ("pooling", ("pool",)),
    ("convolution", ("conv",)),
    ("matmul", ("matmul", "gemm", "bmm", "linear", "matrix", "einsum", "mm_")),
    ("reduction", ("sum", "mean", "max", "min", "argmax", "argmin", "prod", "cumsum", "reduce")),
    ("activation", ("relu", "gelu", "silu", "swish", "sigmoid", "tanh", "elu", "mish",
                    "softplus", "hardtanh", "selu")),
)



# CPython 3.11's parser keeps its recursion count per interpreter: two threads parsing at once
# failed one with "AST constructor recursion depth mismatch" (the grader's slots, in CI). Every
# parse in a process that grades or validates in threads takes this lock.
PARSE_LOCK = threading.RLock()


def parse(source: str, filename: str = "<unknown>") -> ast.AST:
    with PARSE_LOCK:
        return ast.parse(source, filename=filename)

@dataclass
class Problem:
    """A statically checked source and what could be read from it without running it."""

    source: str
    path: str | None
    name: str
    description: str
    category: str
    level: int
    model_class: str
    forward_arity: tuple[int, int | None]  # (min, max) positional args; max None for *args
    n_inputs: int | None  # len of get_inputs()'s literal return list, when statically visible

    @property
    def is_candidate(self) -> bool:
        return self.model_class == "ModelNew"


def _top_level_defs(tree: ast.Module) -> dict[str, ast.AST]:
    defs: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defs[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    defs[target.id] = node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                defs[(alias.asname or alias.name).split(".")[0]] = node
    return defs


def _arity(fn: ast.FunctionDef) -> tuple[int, int | None]:
    positional = [*fn.args.posonlyargs, *fn.args.args]
    if positional and positional[0].arg in ("self", "cls"):
        positional = positional[1:]
    required = len(positional) - len(fn.args.defaults)
    return required, (None if fn.args.vararg else len(positional))


def _literal_return_length(fn: ast.AST) -> int | None:
    """Length of the list/tuple a function returns, when every return is one literal."""
    if not isinstance(fn, ast.FunctionDef):
        return None
    lengths = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Return):
            value = node.value
            if not isinstance(value, (ast.List, ast.Tuple)):
                return None
            if any(isinstance(e, ast.Starred) for e in value.elts):
                return None
            lengths.add(len(value.elts))
    return lengths.pop() if len(lengths) == 1 else None


def _method(cls: ast.ClassDef, name: str) -> ast.FunctionDef | None:
    for node in cls.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    return None


def _fits(n: int, arity: tuple[int, int | None]) -> bool:
    low, high = arity
    return n >= low and (high is None or n <= high)


def _describe(arity: tuple[int, int | None]) -> str:
    low, high = arity
    if high is None:
        return f"at least {low}"
    return str(low) if low == high else f"{low} to {high}"


def parse_metadata(docstring: str | None) -> tuple[str, str | None, int | None]:
    """(one-line description, declared category or None, declared level or None)."""
    if not docstring:
        return "", None, None
    lines = [line.strip() for line in docstring.strip().splitlines()]
    description = lines[0] if lines else ""
    category = level = None
    for line in lines:
        match = re.match(r"(?i)^category\s*:\s*([\w-]+)", line)
        if match:
            category = match.group(1).lower()
        match = re.match(r"(?i)^level\s*:\s*(\d+)", line)
        if match:
            level = int(match.group(1))
    return description, category, level


def guess_category(name: str, source: str) -> str:
    text = f"{name} {source}".lower()
    for category, hints in _CATEGORY_HINTS:
        if any(h in text for h in hints):
            return category
    return "other"


def check_source(source: str, path: str | None = None, *, candidate: bool = False,
                 name: str | None = None) -> Problem:
    """Check a source statically and describe it; raise ``ProblemError`` (file:line) if bad."""
    try:
        tree = parse(source, filename=path or "<source>")
    except SyntaxError as exc:
        raise ProblemError(f"syntax error: {exc.msg}", path, exc.lineno) from None
    defs = _top_level_defs(tree)
    model_name = "ModelNew" if candidate else "Model"
    required = (model_name,) if candidate else (model_name, "get_inputs", "get_init_inputs")
    missing = [n for n in required if n not in defs]
    if missing:
        raise ProblemError(f"does not define {', '.join(missing)} (KernelBench format needs "
                           f"{', '.join(required)})", path, 1)

    model = defs[model_name]
    forward_arity: tuple[int, int | None] = (0, None)
    init_arity: tuple[int, int | None] = (0, None)
    forward = init = None
    if isinstance(model, ast.ClassDef):
        forward = _method(model, "forward")
        if forward is None and all(isinstance(b, ast.Attribute) and b.attr == "Module"
                                   for b in model.bases):
            raise ProblemError(f"class {model_name} defines no forward method", path, model.lineno)
        if forward is not None:
            forward_arity = _arity(forward)
        init = _method(model, "__init__")
        if init is not None:
            init_arity = _arity(init)

    n_inputs = None
    if not candidate:
        n_inputs = _literal_return_length(defs["get_inputs"])
        if n_inputs is not None and not _fits(n_inputs, forward_arity):
            line = forward.lineno if forward is not None else model.lineno
            raise ProblemError(f"get_inputs() returns {n_inputs} input(s) but {model_name}.forward "
                               f"takes {_describe(forward_arity)}", path, line)
        n_init = _literal_return_length(defs["get_init_inputs"])
        if n_init is not None and not _fits(n_init, init_arity):
            raise ProblemError(f"get_init_inputs() returns {n_init} value(s) but {model_name}."
                               f"__init__ takes {_describe(init_arity)}", path,
                               init.lineno if init is not None else model.lineno)

    description, category, level = parse_metadata(ast.get_docstring(tree))
    stem = Path(path).stem if path else (name or "problem")
    name = name or re.sub(r"^\d+_", "", stem)
    if category is not None and category not in CATEGORIES:
        raise ProblemError(f"unknown category {category!r} (one of {', '.join(CATEGORIES)})",
                           path, 1)
    return Problem(source=source, path=path, name=name, description=description,
                   category=category or guess_category(name, source), level=level or 1,
                   model_class=model_name, forward_arity=forward_arity, n_inputs=n_inputs)


def read_source(path: str | Path) -> str:
    """The text of a problem or candidate file, decoded strictly as UTF-8.

    Bytes that are not UTF-8 raise ``ProblemError`` with the file, line and column: replacing
    them would silently change the program and its name.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ProblemError(f"cannot read file: {exc.strerror or exc}", str(path)) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ProblemError(f"cannot read file: not UTF-8 (byte 0x{data[exc.start]:02x} at column "
                           f"{column})", str(path), line) from None


def load_problem(path: str | Path, *, candidate: bool = False) -> Problem:
    """Read a file and check it; ``ProblemError`` names the file and line of the first fault."""
    return check_source(read_source(path), str(path), candidate=candidate)
