"""What dedup, clustering and decontamination read from a problem source, in one ``ast`` pass.

``extract(source)`` parses once and returns three views of the program:

- ``exact``: a token serialization of the whole module (imports, constants, ``Model``,
  ``get_inputs`` ...) with comments, docstrings and formatting gone and *local names* (function
  arguments, local variables, ``self.`` attributes) replaced by positional placeholders, import
  aliases written as the module they stand for (``F`` -> ``torch.nn.functional``). Two sources
  with the same exact stream are the same program up to comments, layout and naming. (This is
  the exact key's basis instead of ``canonical_source(rename_locals=True)``: same equivalence,
  plus attribute and alias names, at a fraction of the cost: no ``ast.unparse``.)
- ``tokens``: the near-duplicate stream: only the computation (the ``Model`` class and helper
  functions and classes), with the shared boilerplate stripped (imports, ``get_inputs`` /
  ``get_init_inputs``, module-level size constants, ``super().__init__()``, class and ``def``
  headers of ``__init__``/``forward``), locals renamed, every number replaced by ``#`` and every
  module-level constant name by ``$``. Shingles of this stream feed MinHash; windows of it feed
  the long n-gram contamination check.
- ``ops``: the op stream of ``Model.forward`` in evaluation order (post-order: arguments before
  the call), with ``self.<module>`` calls resolved to the module type built in ``__init__``
  (``nn.Sequential`` expanded), calls to ``self.<method>`` and module-level helper functions
  inlined, Python operators mapped to their torch names (``@`` -> ``matmul``), loops marked
  ``loop{ ... }``. Op names are normalized so that ``torch.relu``, ``F.relu``, ``x.relu()``,
  ``x.relu_()`` and ``nn.ReLU()`` all read ``relu`` (last name component, lower case, no
  underscores). Numbers and constant names never appear: sizes, kernel sizes, strides, scale
  factors and dims are all abstracted, so the same computation at other shapes has the same
  stream. Non-numeric hyper-parameters (strings and booleans such as ``mode='bilinear'``,
  ``bias=False``, an einsum equation) are kept with their value, and the names of the other
  keyword arguments given (``groups=``, ``stride=``, ``dim=``) without their value: a grouped or
  strided convolution is a different kernel from a dense one, a resized copy keeps its keywords.

The extraction never imports or runs the source. A source that does not parse raises
``SyntaxError``.
"""
from __future__ import annotations

import ast
import builtins
import hashlib
from dataclasses import dataclass

from kernelmill.core.problem import parse

BOILERPLATE_FUNCTIONS = frozenset({"get_inputs", "get_init_inputs"})
_BUILTINS = frozenset(dir(builtins))
# Builtins whose calls are bookkeeping, not tensor computation (their arguments still count).
_IGNORED_CALLS = frozenset({"range", "len", "int", "float", "bool", "str", "print", "isinstance",
                            "tuple", "list", "dict", "zip", "enumerate", "super", "getattr",
                            "setattr", "hasattr", "type", "abs", "min", "max", "round", "sum",
                            "reversed", "sorted", "any", "all", "iter", "next"})
_FIXED_BASE = {name: name for name in (*_BUILTINS, "self")}
_SCALAR_MODULES = ("math.", "numpy.", "random.", "operator.")
_CONTAINERS = frozenset({"sequential", "modulelist", "moduledict", "parameterlist"})

_BINOP = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.FloorDiv:
          "floordiv", ast.Mod: "remainder", ast.Pow: "pow", ast.MatMult: "matmul", ast.LShift:
          "lshift", ast.RShift: "rshift", ast.BitOr: "bitwiseor", ast.BitXor: "bitwisexor",
          ast.BitAnd: "bitwiseand"}
_CMPOP = {ast.Eq: "eq", ast.NotEq: "ne", ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge",
          ast.Is: "is", ast.IsNot: "isnot", ast.In: "in", ast.NotIn: "notin"}
_UNARY = {ast.USub: "neg", ast.UAdd: "pos", ast.Invert: "bitwisenot", ast.Not: "not"}


@dataclass
class Features:
    exact: list[str]
    tokens: list[str]
    ops: list[str]
    forward_arity: int = 0

    @property
    def exact_key(self) -> str:
        return stream_hash(self.exact)

    @property
    def structural_key(self) -> str:
        return stream_hash([f"arity:{self.forward_arity}", *self.ops])


def stream_hash(tokens: list[str], length: int = 16) -> str:
    return hashlib.blake2b("\x1f".join(tokens).encode("utf-8"), digest_size=length // 2).hexdigest()


def op_name(qualified: str) -> str:
    """``torch.nn.functional.layer_norm`` / ``nn.LayerNorm`` / ``x.layer_norm_`` -> ``layernorm``."""
    return qualified.rsplit(".", 1)[-1].lower().replace("_", "")


def _is_number(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (int, float, complex)) and not isinstance(node.value, bool)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return _is_number(node.operand)
    return False


def _module_names(tree: ast.Module) -> tuple[dict[str, str], set[str], set[str]]:
    """(import aliases -> qualified path, module-level constant names, other top-level names)."""
    aliases: dict[str, str] = {}
    constants: set[str] = set()
    defined: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    aliases[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    aliases[top] = top
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                elts = target.elts if type(target) in (ast.Tuple, ast.List) else [target]
                constants.update(e.id for e in elts if type(e) is ast.Name)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
    return aliases, constants, defined


class _Emitter:
    """Serializes statements to tokens; names are normalized per the scope being emitted.

    Operators are written in prefix order and variable-length lists are closed, so different
    trees never share a stream.
    """

    def __init__(self, constants: set[str], globals_: set[str], aliases: dict[str, str]):
        # names that never become placeholders: module constants ('$NAME'), import aliases (as
        # their qualified path: `F` and `torch.nn.functional` read the same), module-level defs
        fixed = _FIXED_BASE.copy()
        fixed.update((name, name) for name in globals_)
        fixed.update(aliases)
        fixed.update((name, f"${name}") for name in constants)
        self.fixed = fixed
        self.out: list[str] = []
        self.spans: list[tuple[int, int]] = []  # [start, end) of out that the near stream keeps
        self.locals: dict[str, str] = {}
        self.attrs: dict[str, str] = {}

    # --- names -----------------------------------------------------------------------------
    def name(self, ident: str) -> str:
        fixed = self.fixed.get(ident)
        if fixed is not None:
            return fixed
        local = self.locals.get(ident)
        if local is None:
            local = self.locals[ident] = f"v{len(self.locals)}"
        return local

    def attr(self, ident: str) -> str:
        alias = self.attrs.get(ident)
        if alias is None:
            alias = self.attrs[ident] = f"a{len(self.attrs)}"
        return alias

    # --- statements ------------------------------------------------------------------------
    def body(self, stmts: list[ast.stmt]) -> None:
        for stmt in stmts:
            self.stmt(stmt)

    def function(self, node: ast.FunctionDef | ast.AsyncFunctionDef, header: bool = True) -> None:
        saved = self.locals
        self.locals = {}
        out = self.out
        if header:
            out.append("def")
            out.append(node.name)
        self.arguments(node.args)
        body = node.body
        if body and _is_docstring(body[0]):
            body = body[1:]
        self.body(body)
        out.append("}")
        self.locals = saved

    def arguments(self, args: ast.arguments) -> None:
        out = self.out
        out.append("(")
        for arg in (*args.posonlyargs, *args.args):
            out.append(self.name(arg.arg))
        if args.vararg:
            out.append("*" + self.name(args.vararg.arg))
        for arg in args.kwonlyargs:
            out.append(self.name(arg.arg))
        if args.kwarg:
            out.append("**" + self.name(args.kwarg.arg))
        for default in (*args.defaults, *(d for d in args.kw_defaults if d is not None)):
            self.expr(default)
        out.append(")")

    def stmt(self, node: ast.stmt) -> None:
        out = self.out
        kind = type(node)
        if kind is ast.Assign:
            for target in node.targets:
                self.expr(target)
            out.append("=")
            self.expr(node.value)
        elif kind is ast.Return:
            out.append("return")
            if node.value is not None:
                self.expr(node.value)
        elif kind is ast.Expr:
            if _is_docstring(node):
                return
            self.expr(node.value)
        elif kind is ast.AugAssign:
            self.expr(node.target)
            out.append(_BINOP.get(type(node.op), type(node.op).__name__) + "=")
            self.expr(node.value)
        elif kind is ast.AnnAssign:
            self.expr(node.target)
            out.append("=")
            if node.value is not None:
                self.expr(node.value)
        elif kind is ast.For:
            out.append("for")
            self.expr(node.target)
            self.expr(node.iter)
            self.body(node.body)
            if node.orelse:
                out.append("else")
                self.body(node.orelse)
            out.append("}")
        elif kind is ast.If or kind is ast.While:
            out.append("if" if kind is ast.If else "while")
            self.expr(node.test)
            self.body(node.body)
            if node.orelse:
                out.append("else")
                self.body(node.orelse)
            out.append("}")
        elif kind is ast.FunctionDef or kind is ast.AsyncFunctionDef:
            for deco in node.decorator_list:
                out.append("@")
                self.expr(deco)
            self.function(node)
        elif kind is ast.ClassDef:
            self.klass(node)
        elif kind is ast.Import or kind is ast.ImportFrom:
            out.append("import")
            if kind is ast.ImportFrom:
                out.append(f"{'.' * node.level}{node.module or ''}")
            for alias in node.names:
                out.append(alias.name)
                out.append(f"as:{alias.asname or ''}")
        else:
            self.generic(node)
        out.append(";")

    def klass(self, node: ast.ClassDef) -> None:
        """Emit a class; record in ``spans`` the stretches that carry its computation (method
        bodies without docstrings and ``super().__init__()``), which make the near stream."""
        out = self.out
        out.append("class")
        out.append(node.name)
        for base in node.bases:
            self.expr(base)
        saved_attrs = self.attrs
        self.attrs = {}
        for item in node.body:
            kind = type(item)
            if kind is ast.FunctionDef or kind is ast.AsyncFunctionDef:
                for deco in item.decorator_list:
                    out.append("@")
                    self.expr(deco)
                out.append("def")
                self.spans.append((len(out), len(out) + 1))
                out.append(item.name)
                saved = self.locals
                self.locals = {}
                start = len(out)
                self.arguments(item.args)
                self.spans.append((start, len(out)))
                for stmt in item.body:
                    start = len(out)
                    self.stmt(stmt)
                    if not (_is_super_init(stmt) or _is_docstring(stmt)):
                        self.spans.append((start, len(out)))
                out.append("}")
                self.locals = saved
            else:
                start = len(out)
                self.stmt(item)
                self.spans.append((start, len(out)))
        out.append("}")
        self.attrs = saved_attrs

    # --- expressions -----------------------------------------------------------------------
    def expr(self, node: ast.AST) -> None:
        out = self.out
        kind = type(node)
        if kind is ast.Name:
            ident = node.id
            name = self.fixed.get(ident) or self.locals.get(ident)
            out.append(name if name is not None else self.name(ident))
        elif kind is ast.Constant:
            value = node.value
            if isinstance(value, (int, float, complex)) and not isinstance(value, bool):
                out.append("#" + repr(value))
            else:
                out.append(repr(value))
        elif kind is ast.Attribute:
            value = node.value
            if type(value) is ast.Name and value.id == "self":
                out.append("self." + self.attr(node.attr))
            else:
                self.expr(value)
                out.append("." + node.attr)
        elif kind is ast.Call:
            self.expr(node.func)
            out.append("(")
            for arg in node.args:
                self.expr(arg)
            for kw in node.keywords:
                out.append(f"{kw.arg}=" if kw.arg else "**")
                self.expr(kw.value)
            out.append(")")
        elif kind is ast.BinOp:
            out.append(_BINOP.get(type(node.op), "binop"))
            self.expr(node.left)
            self.expr(node.right)
        elif kind is ast.UnaryOp:
            out.append(_UNARY.get(type(node.op), "unary"))
            self.expr(node.operand)
        elif kind is ast.Subscript:
            self.expr(node.value)
            out.append("[")
            self.expr(node.slice)
            out.append("]")
        elif kind is ast.Tuple or kind is ast.List:
            out.append("(" if kind is ast.Tuple else "[")
            for elt in node.elts:
                self.expr(elt)
            out.append(")" if kind is ast.Tuple else "]")
        elif kind is ast.Slice:
            out.append(":")
            for part in (node.lower, node.upper, node.step):
                if part is None:
                    out.append("_")
                else:
                    self.expr(part)
        elif kind is ast.Compare:
            out.append("cmp")
            self.expr(node.left)
            for op, right in zip(node.ops, node.comparators):
                out.append(_CMPOP.get(type(op), "cmp"))
                self.expr(right)
            out.append(")")
        else:
            self.generic(node)

    def generic(self, node: ast.AST) -> None:
        out = self.out
        out.append(type(node).__name__)
        for _name, value in ast.iter_fields(node):
            if isinstance(value, list):
                for item in value:
                    if isinstance(item, ast.stmt):
                        self.stmt(item)
                    elif isinstance(item, ast.AST):
                        self.expr(item)
                    else:
                        out.append(repr(item))
                out.append("]")
            elif isinstance(value, (ast.expr_context, ast.boolop, ast.operator, ast.unaryop,
                                    ast.cmpop)):
                out.append(type(value).__name__)
            elif isinstance(value, ast.stmt):
                self.stmt(value)
            elif isinstance(value, ast.AST):
                self.expr(value)
            elif isinstance(value, str) and _name in ("arg", "id", "name"):
                out.append(self.name(value))
            elif value is not None:
                out.append(repr(value))
        out.append(")")


def _is_docstring(node: ast.stmt) -> bool:
    return (type(node) is ast.Expr and type(node.value) is ast.Constant
            and isinstance(node.value.value, str))


def _is_super_init(node: ast.stmt) -> bool:
    if type(node) is not ast.Expr or type(node.value) is not ast.Call:
        return False
    func = node.value.func
    return (type(func) is ast.Attribute and func.attr == "__init__"
            and type(func.value) is ast.Call and type(func.value.func) is ast.Name
            and func.value.func.id == "super")


class _OpExtractor:
    """Post-order op stream of ``forward`` (see the module docstring)."""

    def __init__(self, aliases: dict[str, str], constants: set[str],
                 functions: dict[str, ast.FunctionDef]):
        self.aliases = aliases
        self.constants = constants
        self.functions = functions
        self.methods: dict[str, ast.FunctionDef] = {}
        self.modules: dict[str, list[str]] = {}  # self.<attr> -> op tokens
        self.out: list[str] = []
        self.stack: list[str] = []

    def qualify(self, node: ast.AST) -> str | None:
        if type(node) is ast.Name:
            return self.aliases.get(node.id, node.id)
        if type(node) is ast.Attribute:
            base = self.qualify(node.value)
            return f"{base}.{node.attr}" if base is not None else None
        return None

    def hyper(self, call: ast.Call) -> str:
        """Hyper-parameters that change the computation: non-numeric literals (strings,
        booleans: ``mode='bilinear'``, ``bias=False``, an einsum equation) with their value,
        and the names of the other keywords given (``groups``, ``stride``) without it."""
        parts = [repr(a.value) for a in call.args
                 if type(a) is ast.Constant and not _is_number(a) and a.value is not None]
        for kw in call.keywords:
            if not kw.arg:
                continue
            value = kw.value
            if type(value) is ast.Constant and not _is_number(value):
                parts.append(f"{kw.arg}={value.value!r}")
            else:
                parts.append(kw.arg)
        return f"[{','.join(sorted(parts))}]" if parts else ""

    def module_tokens(self, node: ast.AST) -> list[str] | None:
        """Op tokens of a module constructor expression (``nn.Conv2d(...)``, ``nn.Sequential``)."""
        if type(node) is not ast.Call:
            return None
        qualified = self.qualify(node.func)
        if not qualified or not qualified[:1].isalpha():
            return None
        name = op_name(qualified)
        if qualified.startswith("torch.nn.") or qualified.split(".")[0] in ("nn",):
            if name in _CONTAINERS:
                tokens: list[str] = [name + "{"]
                for arg in node.args:
                    inner = arg.elts if type(arg) in (ast.List, ast.Tuple) else [arg]
                    for elt in inner:
                        if type(elt) is ast.ListComp:
                            elt = elt.elt
                        sub = self.module_tokens(elt)
                        if sub:
                            tokens += sub
                tokens.append("}")
                return tokens
            if name in ("parameter", "buffer"):
                return None
            return [name + self.hyper(node)]
        return None

    def collect_init(self, cls: ast.ClassDef) -> None:
        for node in cls.body:
            if isinstance(node, ast.FunctionDef):
                self.methods[node.name] = node
        init = self.methods.get("__init__")
        if init is None:
            return
        stack = list(init.body)
        while stack:  # statements only: module attributes are assigned at statement level
            node = stack.pop()
            if type(node) in (ast.If, ast.For, ast.While, ast.With):
                stack.extend(node.body)
                stack.extend(getattr(node, "orelse", ()))
            elif type(node) is ast.Assign and len(node.targets) == 1:
                target = node.targets[0]
                if (type(target) is ast.Attribute and type(target.value) is ast.Name
                        and target.value.id == "self"):
                    tokens = self.module_tokens(node.value)
                    if tokens:
                        self.modules[target.attr] = tokens

    def inline(self, fn: ast.FunctionDef, key: str) -> None:
        if key in self.stack or len(self.stack) > 8:
            self.out.append("recurse")
            return
        self.stack.append(key)
        for stmt in fn.body:
            self.visit(stmt)
        self.stack.pop()

    def visit(self, node: ast.AST) -> None:
        kind = type(node)
        out = self.out
        if kind is ast.Call:
            self.call(node)
        elif kind is ast.BinOp:
            self.visit(node.left)
            self.visit(node.right)
            if not (_is_number(node.left) and _is_number(node.right)):
                out.append(_BINOP.get(type(node.op), "binop"))
        elif kind is ast.UnaryOp:
            if _is_number(node):
                return
            self.visit(node.operand)
            out.append(_UNARY.get(type(node.op), "unary"))
        elif kind is ast.Compare:
            self.visit(node.left)
            for op, right in zip(node.ops, node.comparators):
                self.visit(right)
                out.append(_CMPOP.get(type(op), "cmp"))
        elif kind is ast.Subscript:
            self.visit(node.value)
            self.visit(node.slice)
            out.append("getitem")
        elif kind is ast.Attribute:
            if type(node.value) is ast.Name and node.value.id == "self":
                return  # a parameter or buffer used as an operand
            if self.qualify(node) is not None and type(node.value) is ast.Name and \
                    node.value.id in self.aliases:
                return  # a module-level name such as torch.float32
            self.visit(node.value)
            out.append("." + node.attr)
        elif kind is ast.For or kind is ast.While:
            out.append("loop{")
            self.visit(node.iter if kind is ast.For else node.test)
            for stmt in node.body:
                self.visit(stmt)
            out.append("}")
        elif kind is ast.If:
            self.visit(node.test)
            out.append("if{")
            for stmt in node.body:
                self.visit(stmt)
            if node.orelse:
                out.append("else")
                for stmt in node.orelse:
                    self.visit(stmt)
            out.append("}")
        elif kind is ast.Return or kind is ast.Expr or kind is ast.Assign:
            if node.value is not None:
                self.visit(node.value)
        elif kind is ast.AugAssign:
            self.visit(node.target)
            self.visit(node.value)
            out.append(_BINOP.get(type(node.op), "binop"))
        elif kind in (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda,
                      ast.Constant, ast.Name):
            return
        else:
            for child in ast.iter_child_nodes(node):
                self.visit(child)

    def call(self, node: ast.Call) -> None:
        func = node.func
        out = self.out
        # self.<module>(...) or self.<method>(...)
        if type(func) is ast.Attribute and type(func.value) is ast.Name and func.value.id == "self":
            for arg in node.args:
                self.visit(arg)
            for kw in node.keywords:
                self.visit(kw.value)
            if func.attr in self.modules:
                out.extend(self.modules[func.attr])
            elif func.attr in self.methods:
                self.inline(self.methods[func.attr], "self." + func.attr)
            else:
                out.append("call")
            return
        qualified = self.qualify(func)
        if qualified is None and type(func) is ast.Attribute:
            # a method on a computed value: x.relu(), (a + b).sum(dim=1)
            self.visit(func.value)
            for arg in node.args:
                self.visit(arg)
            for kw in node.keywords:
                self.visit(kw.value)
            out.append(op_name(func.attr) + self.hyper(node))
            return
        for arg in node.args:
            self.visit(arg)
        for kw in node.keywords:
            self.visit(kw.value)
        if qualified is None:
            out.append("call")
            return
        root = qualified.split(".")[0]
        if type(func) is ast.Name:
            if func.id in self.functions:
                self.inline(self.functions[func.id], func.id)
            elif func.id in self.aliases:
                out.append(op_name(qualified) + self.hyper(node))
            elif func.id not in _IGNORED_CALLS:
                out.append("call")  # a local callable or a class of this file
            return
        if qualified.startswith(_SCALAR_MODULES):
            return
        elif type(func) is ast.Attribute and root not in self.aliases:
            # a method on a local variable: x.relu(), x.view(...)
            self.visit(func.value)
            out.append(op_name(func.attr) + self.hyper(node))
        else:
            out.append(op_name(qualified) + self.hyper(node))


def extract(source: str) -> Features:
    """All three views of ``source`` from one parse; raises ``SyntaxError`` if it won't parse."""
    tree = parse(source)
    aliases, constants, defined = _module_names(tree)
    globals_ = set(aliases) | defined
    constants = constants - globals_

    emitter = _Emitter(constants, globals_, aliases)
    out = emitter.out
    spans = emitter.spans
    functions: dict[str, ast.FunctionDef] = {}
    model: ast.ClassDef | None = None
    body = tree.body
    if body and _is_docstring(body[0]):
        body = body[1:]
    for node in body:
        start = len(out)
        emitter.stmt(node)
        kind = type(node)
        if kind is ast.FunctionDef or kind is ast.AsyncFunctionDef:
            if node.name not in BOILERPLATE_FUNCTIONS:
                functions[node.name] = node
                spans.append((start, len(out)))
        elif kind is ast.ClassDef:
            if node.name in ("Model", "ModelNew") and model is None:
                model = node
        elif kind in (ast.Import, ast.ImportFrom, ast.Assign, ast.AnnAssign, ast.AugAssign) or \
                _is_docstring(node) or (kind is ast.If and _is_main_guard(node)):
            continue
        else:
            spans.append((start, len(out)))
    tokens = [t[0] if t[0] in "#$" else t for a, b in spans for t in out[a:b]]

    ops = _OpExtractor(aliases, constants, functions)
    arity = 0
    if model is not None:
        ops.collect_init(model)
        forward = ops.methods.get("forward")
        if forward is not None:
            arity = len(forward.args.args) - 1 + len(forward.args.posonlyargs)
            ops.inline(forward, "self.forward")
    return Features(exact=out, tokens=tokens, ops=ops.out, forward_arity=arity)


def _is_main_guard(node: ast.If) -> bool:
    test = node.test
    return (type(test) is ast.Compare and type(test.left) is ast.Name
            and test.left.id == "__name__")
