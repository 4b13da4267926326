"""Trace a problem source at full size without computing it: shapes, dataflow and value ranges.

``trace_source(source)`` runs ``get_inputs()``, ``Model(*get_init_inputs())`` and ``forward``
on the ``meta`` device (no memory, no arithmetic: full-size shapes cost microseconds) under a
``TorchFunctionMode`` that records every torch call as a ``Node``: the op (looked up in the catalog
by the called function's name, so ``F.relu``, ``torch.relu``, ``x.relu()`` and ``nn.ReLU`` meet),
its tensor inputs, its parameters and its output ``Value``. A ``Value`` carries an interval
``[lo, hi]`` and a typical magnitude ``scale`` propagated by abstract interpretation, so
synth/degeneracy.py can tell that a ReLU is fed only non-negative numbers, a sigmoid is saturated
or a clamp yields a constant, on composed problems and on mutated seeds alike.

The source is executed (on meta tensors), so only trusted sources are traced: our own compositions
and mutations of seeds and imports. LLM proposals get the static checks only, unless asked.
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from .catalog import Catalog, Op, default_catalog

INF = math.inf

# functions whose output is a fresh random or constant tensor, and what it holds
_FACTORIES = {"randn": ("normal", 1.0), "randn_like": ("normal", 1.0), "rand": ("uniform", 0.58),
              "rand_like": ("uniform", 0.58), "normal": ("normal", 1.0)}
_CONSTANT_FACTORIES = {"zeros": 0.0, "zeros_like": 0.0, "ones": 1.0, "ones_like": 1.0}
_RANDOM_IN_FORWARD = {"randn", "rand", "randn_like", "rand_like", "randint", "randint_like",
                      "normal", "bernoulli", "multinomial", "randperm", "rrelu"}
_IGNORED = {"__get__", "__set__", "dim", "size", "numel", "requires_grad_", "detach", "__len__",
            "_set_grad_enabled", "__setstate__", "__reduce_ex__", "__deepcopy__", "is_floating_point",
            "element_size", "stride", "is_contiguous", "data_ptr", "__format__", "__repr__",
            "is_complex", "__bool__", "__index__", "__int__", "__float__", "get_device", "type"}


@dataclass
class Value:
    """An abstract tensor: shape, dtype, an interval holding its values, a typical magnitude."""

    shape: tuple[int, ...]
    dtype: str
    lo: float = -INF
    hi: float = INF
    scale: float = 1.0
    producer: Node | None = None
    depends: frozenset[int] = frozenset()  # indices of the forward inputs it derives from
    integer: bool = False
    known: bool = True  # False when [lo, hi] and scale are guesses (an op outside the catalog)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nonneg(self) -> bool:
        return self.lo >= 0

    @property
    def constant(self) -> bool:
        return self.lo == self.hi


@dataclass
class Node:
    """One traced torch call."""

    name: str  # catalog op name, or the called function's name for ops outside the catalog
    op: Op | None
    inputs: list[Value]
    params: dict[str, Any]
    outputs: list[Value]
    phase: str  # "inputs" | "init" | "forward"

    @property
    def out(self) -> Value | None:
        return self.outputs[0] if self.outputs else None

    @property
    def x(self) -> Value | None:
        return self.inputs[0] if self.inputs else None

    def dim_param(self, default: Any = None) -> Any:
        return self.params.get("dim", default)

    def reduced_dims(self) -> list[int]:
        """Non-negative dims this node reduces or scans over (all dims when ``dim`` is None)."""
        x = self.x
        if x is None:
            return []
        rank = len(x.shape)
        dim = self.params.get("dim", self.op.defaults.get("dim") if self.op else None)
        if dim is None:
            if self.op is not None and self.op.shape == "same_dim":
                return [rank - 1] if self.name in ("softmax", "log_softmax") and rank else []
            return list(range(rank))
        dims = dim if isinstance(dim, (list, tuple)) else [dim]
        try:
            return [int(d) % rank for d in dims] if rank else []
        except (TypeError, ValueError):
            return []


@dataclass
class Trace:
    nodes: list[Node] = field(default_factory=list)
    inputs: list[Value] = field(default_factory=list)
    outputs: list[Value] = field(default_factory=list)
    init_args: list[Any] = field(default_factory=list)

    @property
    def forward_nodes(self) -> list[Node]:
        return [n for n in self.nodes if n.phase == "forward"]


class TraceError(Exception):
    """The source could not be run on the meta device: ``stage`` says where, the text says why."""

    def __init__(self, stage: str, message: str, unsupported: bool = False):
        super().__init__(f"{stage}: {message}")
        self.stage = stage
        self.message = message
        self.unsupported = unsupported  # meta tensors cannot follow it (data-dependent): not invalid


def _dtype_name(t: torch.Tensor) -> str:
    return str(t.dtype).replace("torch.", "")


def _tensors(obj: Any) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for item in obj for t in _tensors(item)]
    return []


def _scalar(obj: Any) -> float | None:
    if isinstance(obj, bool):
        return float(obj)
    if isinstance(obj, (int, float)):
        return float(obj)
    return None


def _bind(op: Op | None, args: tuple, kwargs: dict) -> dict[str, Any]:
    params: dict[str, Any] = {}
    if op is not None:
        params.update(op.defaults)
        for name, value in zip(op.sig, args):
            if name != "x" and not isinstance(value, torch.Tensor):
                params[name] = value
    params.update({k: v for k, v in kwargs.items() if not isinstance(v, torch.Tensor)})
    return params


def _mul_interval(a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float]:
    products = []
    for x in a:
        for y in b:
            if (x == 0 and math.isinf(y)) or (y == 0 and math.isinf(x)):
                products.append(0.0)
            else:
                products.append(x * y)
    return min(products), max(products)


class _Recorder(TorchFunctionMode):
    def __init__(self, catalog: Catalog):
        super().__init__()
        self.catalog = catalog
        self.values: dict[int, Value] = {}
        self.keep: list[Any] = []  # keeps traced tensors alive so their ids stay unique
        self.trace = Trace()
        self.phase = "inputs"

    def value_of(self, t: torch.Tensor) -> Value:
        v = self.values.get(id(t))
        if v is None or v.shape != tuple(t.shape):
            v = Value(tuple(t.shape), _dtype_name(t), integer=not t.is_floating_point())
            self.values[id(t)] = v
            self.keep.append(t)
        return v

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = getattr(func, "__name__", None) or str(func)
        if name not in _IGNORED:
            try:
                self.record(name, args, kwargs, out)
            except Exception:  # noqa: BLE001 — tracing is best effort, the call itself succeeded
                pass
        return out

    # -- abstract interpretation -------------------------------------------------------------
    def record(self, name: str, args: tuple, kwargs: dict, out: Any) -> None:
        in_tensors = _tensors(list(args)) + _tensors(list(kwargs.values()))
        out_tensors = _tensors(out)
        if name.endswith("_") and not name.startswith("_") and in_tensors:
            self.record_inplace(name, args, kwargs, in_tensors[0])
            return
        if not out_tensors:
            return
        op = self.catalog.for_trace(name)
        inputs = [self.value_of(t) for t in in_tensors]
        params = _bind(op, args, kwargs)
        node = Node(op.name if op else name.strip("_"), op, inputs, params, [], self.phase)
        depends = frozenset().union(*(v.depends for v in inputs)) if inputs else frozenset()
        for i, t in enumerate(out_tensors):
            v = Value(tuple(t.shape), _dtype_name(t), producer=node, depends=depends,
                      integer=not t.is_floating_point())
            if i == 0:
                v.known = all(x.known for x in inputs)
                self.transfer(name, node, args, kwargs, v)
            self.values[id(t)] = v
            self.keep.append(t)
            node.outputs.append(v)
        self.trace.nodes.append(node)

    def record_inplace(self, name: str, args: tuple, kwargs: dict, target: torch.Tensor) -> None:
        scalars = [_scalar(a) for a in args[1:]] + [_scalar(v) for v in kwargs.values()]
        scalars = [s for s in scalars if s is not None]
        v = self.value_of(target)
        if name in ("uniform_",) and len(scalars) >= 2:
            v.lo, v.hi = scalars[0], scalars[1]
            v.scale = (v.hi - v.lo) / math.sqrt(12)
        elif name == "kaiming_uniform_" and target.dim() >= 2:
            fan_in = target.shape[1] * math.prod(target.shape[2:])
            a = kwargs.get("a", scalars[0] if scalars else 0.0)
            bound = math.sqrt(6.0 / ((1 + a * a) * fan_in))
            v.lo, v.hi, v.scale = -bound, bound, bound / math.sqrt(3)
        elif name in ("normal_",):
            std = kwargs.get("std", scalars[1] if len(scalars) > 1 else 1.0)
            v.lo, v.hi, v.scale = -INF, INF, float(std)
        elif name in ("fill_", "constant_") and scalars:
            v.lo = v.hi = scalars[-1]
            v.scale = abs(scalars[-1])
        elif name in ("zero_", "zeros_"):
            v.lo = v.hi = v.scale = 0.0
        elif name in ("ones_",):
            v.lo = v.hi = v.scale = 1.0
        else:
            v.lo, v.hi = -INF, INF

    def transfer(self, name: str, node: Node, args: tuple, kwargs: dict, v: Value) -> None:
        base = name.strip("_")
        x = node.inputs[0] if node.inputs else None
        other = node.inputs[1] if len(node.inputs) > 1 else None
        scalar = next((s for s in (_scalar(a) for a in args[1:2]) if s is not None), None)
        if base in _FACTORIES:
            kind, scale = _FACTORIES[base]
            v.lo, v.hi, v.scale = (0.0, 1.0, scale) if kind == "uniform" else (-INF, INF, scale)
            return
        if base in _CONSTANT_FACTORIES:
            v.lo = v.hi = v.scale = _CONSTANT_FACTORIES[base]
            return
        if base in ("full", "full_like") and len(args) > 1 and _scalar(args[1]) is not None:
            v.lo = v.hi = v.scale = _scalar(args[1])
            return
        if base in ("tensor", "as_tensor", "scalar_tensor") and args:
            flat = args[0] if isinstance(args[0], (list, tuple)) else [args[0]]
            nums = [_scalar(a) for a in flat]
            if nums and all(n is not None for n in nums):
                v.lo, v.hi = min(nums), max(nums)
                v.scale = max(abs(n) for n in nums)
            return
        if base in ("randint", "randint_like", "randperm"):
            v.lo, v.hi, v.integer = 0.0, INF, True
            return
        if x is None:
            return
        # arithmetic with scalars or tensors
        if base in ("mul", "rmul") or base == "multiply":
            if other is None and scalar is not None:
                v.lo, v.hi = _mul_interval((x.lo, x.hi), (scalar, scalar))
                v.scale = x.scale * abs(scalar)
            elif other is not None:
                if other is x:
                    v.lo, v.hi = 0.0, max(x.lo * x.lo, x.hi * x.hi)
                else:
                    v.lo, v.hi = _mul_interval((x.lo, x.hi), (other.lo, other.hi))
                v.scale = x.scale * other.scale
            self._inherit_int(v, node)
            return
        if base in ("add", "radd", "sub", "rsub"):
            sign = -1.0 if base == "sub" else 1.0
            if other is None and scalar is not None:
                if base == "rsub":
                    v.lo, v.hi = scalar - x.hi, scalar - x.lo
                else:
                    v.lo, v.hi = x.lo + sign * scalar, x.hi + sign * scalar
                v.scale = x.scale
            elif other is not None:
                olo, ohi = (other.lo, other.hi) if sign > 0 else (-other.hi, -other.lo)
                if base == "rsub":
                    olo, ohi = -other.hi, -other.lo
                v.lo, v.hi = x.lo + olo, x.hi + ohi
                v.scale = math.hypot(x.scale, other.scale)
            self._inherit_int(v, node)
            return
        if base in ("div", "true_divide", "truediv", "divide"):
            if other is None and scalar not in (None, 0.0):
                v.lo, v.hi = _mul_interval((x.lo, x.hi), (1 / scalar, 1 / scalar))
                v.scale = x.scale / abs(scalar)
            else:
                v.known = False
            return
        if base == "neg":
            v.lo, v.hi, v.scale = -x.hi, -x.lo, x.scale
            return
        if base in ("pow",) and scalar == 2:
            v.lo, v.hi, v.scale = 0.0, max(x.lo ** 2, x.hi ** 2), x.scale ** 2
            return
        if base in ("minimum", "min") and other is not None and not node.params.get("dim"):
            v.lo, v.hi = min(x.lo, other.lo), min(x.hi, other.hi)
            v.scale = x.scale
            return
        if base in ("maximum", "max") and other is not None and not node.params.get("dim"):
            v.lo, v.hi = max(x.lo, other.lo), max(x.hi, other.hi)
            v.scale = x.scale
            return
        if base in ("transpose", "permute", "reshape", "view", "flatten", "contiguous", "t", "T",
                    "unsqueeze", "squeeze", "expand", "clone", "to", "float", "half", "bfloat16",
                    "cat", "stack", "narrow", "chunk", "split", "getitem", "mT", "repeat"):
            v.lo, v.hi, v.scale = x.lo, x.hi, x.scale
            v.integer = x.integer and not base in ("float", "half", "bfloat16")
            return
        op = node.op
        if op is None:
            v.lo, v.hi, v.scale, v.known = x.lo, x.hi, x.scale, False
            v.lo = -INF
            v.hi = INF
            return
        rule = op.value if op.has_role("main") and op.main_call else op.out
        self.apply_rule(rule, node, v)

    @staticmethod
    def _inherit_int(v: Value, node: Node) -> None:
        v.integer = all(i.integer for i in node.inputs) and v.integer

    def apply_rule(self, rule: str, node: Node, v: Value) -> None:
        x = node.inputs[0]
        lo, hi, s = x.lo, x.hi, x.scale
        n = math.prod(x.shape[d] for d in node.reduced_dims()) if node.op.reduces else 1
        clipped = x.producer.inputs[0] if (x.producer is not None and x.producer.op is not None
                                            and x.producer.op.out == "clip"
                                            and x.producer.inputs) else None
        if (rule == "keep" and node.op.reduces and n >= 64 and clipped is not None
                and node.name in ("amax", "max_values", "amin", "min_values")):
            # the max of many clipped values is the clip bound once a good share exceeds it
            upper = node.name in ("amax", "max_values")
            bound = hi if upper else lo
            if math.isfinite(bound) and clipped.scale >= abs(bound) and (
                    clipped.hi > bound if upper else clipped.lo < bound):
                v.lo = v.hi = bound
                v.scale = abs(bound)
                return
        smooth = x.producer if (x.producer is not None and x.producer.op is not None
                                and x.producer.op.out == "smooth_rect" and x.producer.inputs) else None
        if (rule == "keep" and node.op.reduces and n >= 64 and smooth is not None
                and node.name in ("amin", "min_values") and smooth.inputs[0].lo == -INF
                and smooth.inputs[0].scale >= 0.5 and smooth.name in _SMOOTH_MINIMUM):
            # GELU/SiLU/Mish/HardSwish reach their minimum inside the bulk of a unit-scale input:
            # the min of many of them is that minimum, whatever the input
            v.lo = v.hi = _SMOOTH_MINIMUM[smooth.name]
            v.scale = abs(v.lo)
            return
        if rule == "keep" and node.op.reduces and n >= 64 and x.known and lo == -INF and hi == INF:
            # the max (min) of many centred values sits some sigmas above (below) zero
            extreme = 0.5 * s * math.sqrt(2 * math.log(n))
            if node.name in ("amax", "max_values", "topk_values"):
                v.lo, v.hi, v.scale = extreme, INF, max(s, extreme)
            elif node.name in ("amin", "min_values"):
                v.lo, v.hi, v.scale = -INF, -extreme, max(s, extreme)
            else:
                v.lo, v.hi, v.scale = lo, hi, s
        elif rule == "keep":
            v.lo, v.hi, v.scale = lo, hi, s
        elif rule == "any":
            v.scale, v.known = s, False
        elif rule == "abs":
            v.lo = 0.0 if lo <= 0 <= hi else min(abs(lo), abs(hi))
            v.hi, v.scale = max(abs(lo), abs(hi)), s
        elif rule == "pos":
            v.lo, v.hi, v.scale = 1e-30, INF, max(s, 0.5)
        elif rule == "nonneg" and node.op.reduces and n >= 64 and x.known:
            # a norm or std over many values concentrates around its expectation
            expected = s * math.sqrt(n) if node.op.name == "vector_norm" else s
            v.lo, v.hi, v.scale = 0.25 * expected, 4.0 * expected, expected
        elif rule == "nonneg":
            v.lo, v.hi, v.scale = 0.0, INF, s
        elif rule == "square" and node.op.reduces and n >= 64 and x.known:
            v.lo, v.hi, v.scale = 0.25 * s * s, 4.0 * s * s, s * s  # variance concentrates too
        elif rule == "square":
            v.lo, v.hi, v.scale = 0.0, INF, s * s
        elif rule == "sym1":
            v.lo, v.hi, v.scale = max(-1.0, lo), min(1.0, hi), min(s, 0.7)
            if node.name in ("sin", "cos"):
                v.lo, v.hi = -1.0, 1.0
        elif rule == "unit":
            v.lo = 0.0 if node.name == "hardsigmoid" else 1e-30  # sigmoid, softmax: positive
            v.hi, v.scale = 1.0, 0.5 if node.name != "softmax" else 1.0 / max(n, 1)
        elif rule == "negative":
            v.lo, v.hi, v.scale = -INF, 0.0, s
        elif rule == "logprob":
            v.lo, v.hi, v.scale = -INF, 0.0, max(s, math.log(max(n, 2)))
        elif rule == "clip":
            blo, bhi = self.bounds(node)
            v.lo = min(max(lo, blo), bhi)
            v.hi = max(min(hi, bhi), blo)
            v.scale = min(s, max(abs(blo), abs(bhi)))
        elif rule == "leaky":
            slope = node.params.get("negative_slope", 0.25)
            v.lo = lo * slope if lo < 0 else lo
            v.hi, v.scale = hi, s
        elif rule == "elu":
            v.lo = max(lo, -2.0) if lo < 0 else lo
            v.hi, v.scale = hi, s
        elif rule == "smooth_rect":
            v.lo = -0.3 if lo < 0 else 0.0
            v.hi, v.scale = hi, s * 0.6
        elif rule == "norm":
            v.scale = 1.0
        elif rule == "sum":
            v.lo = lo * n if lo > -INF else -INF
            v.hi = hi * n if hi < INF else INF
            v.scale = s * math.sqrt(n) if lo < 0 else s * n
        elif rule == "mean":
            v.lo, v.hi = lo, hi
            v.scale = s / math.sqrt(max(n, 1)) if lo < 0 else s
        elif rule == "lse":
            # lse lies within [lo, hi] + log n; a centred input's lse is about log n
            log_n = math.log(max(n, 1))
            if node.op.scan:  # logcumsumexp: the first element is the input itself
                v.lo = lo
            else:
                v.lo = lo + log_n if lo > -INF else (log_n - 1.0 if x.known and n >= 64 else -INF)
            v.hi = hi + log_n if hi < INF else INF
            producer = x.producer
            if (producer is not None and producer.name == "log_softmax"
                    and set(producer.reduced_dims()) == set(node.reduced_dims())):
                v.hi = 0.0  # log of a partial sum of probabilities
            v.scale = max(s, log_n)
        elif rule == "int":
            v.integer, v.lo, v.hi = True, 0.0, INF
        elif rule == "linear":
            w = node.inputs[1] if len(node.inputs) > 1 else None
            fan_in = math.prod(w.shape[1:]) if w is not None and len(w.shape) > 1 else 1
            if w is not None and math.isfinite(w.scale) and w.scale > 0:
                v.scale = s * w.scale * math.sqrt(fan_in)
            else:
                v.scale = s / math.sqrt(3)
        elif rule.startswith("matmul"):
            a, b = (node.inputs[1], node.inputs[2]) if node.name in ("addmm", "baddbmm") and len(
                node.inputs) > 2 else (x, node.inputs[1] if len(node.inputs) > 1 else x)
            k = a.shape[-1] if a.shape else 1
            v.scale = a.scale * b.scale * math.sqrt(k)
            if node.name in ("addmm", "baddbmm"):
                v.scale = math.hypot(v.scale, s)
            if a.nonneg and b.nonneg and (a is x or x.nonneg):
                v.lo = 0.0
        elif rule == "glu":  # a * sigmoid(b): the sign of a
            v.lo, v.hi, v.scale = min(lo, 0.0), max(hi, 0.0), s * 0.5
        elif rule == "attention":
            vv = node.inputs[2] if len(node.inputs) > 2 else x
            v.lo, v.hi, v.scale = vv.lo, vv.hi, vv.scale * 0.5
        if node.name in ("softshrink", "hardshrink"):  # values near zero become exactly zero
            lambd = node.params.get("lambd", 0.5)
            lambd = lambd if isinstance(lambd, (int, float)) else 0.5
            if lo <= lambd:
                v.lo = min(v.lo, 0.0)
            if hi >= -lambd:
                v.hi = max(v.hi, 0.0)
        if not node.op.reduces and len(node.inputs) == 1:
            self.tighten(node, v)

    @staticmethod
    def tighten(node: Node, v: Value) -> None:
        """Map finite input bounds through monotone elementwise ops (sigmoid([2, 4]) is narrow)."""
        x = node.inputs[0]
        lo, hi = x.lo, x.hi
        fn = _INCREASING.get(node.name)
        try:
            if fn is not None:
                new_lo = fn(lo, node.params) if lo > -INF else v.lo
                new_hi = fn(hi, node.params) if hi < INF else v.hi
            elif node.name == "cos" and 0.0 <= lo and hi <= math.pi:
                new_lo, new_hi = math.cos(hi), math.cos(lo)
            elif node.name == "sin" and -math.pi / 2 <= lo and hi <= math.pi / 2:
                new_lo, new_hi = math.sin(lo), math.sin(hi)
            else:
                return
        except (OverflowError, ValueError):
            return
        v.lo, v.hi = max(v.lo, new_lo), min(v.hi, new_hi)

    @staticmethod
    def bounds(node: Node) -> tuple[float, float]:
        op = node.op
        if op is None or op.bounds is None:
            return -INF, INF
        out = []
        for b, default in zip(op.bounds, (-INF, INF)):
            if isinstance(b, str):
                val = node.params.get(b, op.defaults.get(b))
                val = _scalar(val) if val is not None else None
                out.append(default if val is None else val)
            else:
                out.append(default if b is None else float(b))
        return out[0], out[1]


_SMOOTH_MINIMUM = {"gelu": -0.17, "silu": -0.2785, "mish": -0.3088, "hardswish": -0.375}


def _gelu(x: float) -> float:
    return 0.5 * x * (1.0 + math.erf(x / math.sqrt(2.0)))


def _silu(x: float) -> float:
    return x / (1.0 + math.exp(-x)) if x > -700 else 0.0


# increasing elementwise functions (on the whole line, or where the trace applies them), so an
# interval maps endpoint by endpoint; gelu/silu/mish only on the non-negative side
_INCREASING = {
    "sigmoid": lambda x, p: 1.0 / (1.0 + math.exp(-x)) if x > -700 else 0.0,
    "tanh": lambda x, p: math.tanh(x),
    "erf": lambda x, p: math.erf(x),
    "softsign": lambda x, p: x / (1.0 + abs(x)),
    "hardsigmoid": lambda x, p: min(1.0, max(0.0, x / 6.0 + 0.5)),
    "exp": lambda x, p: math.exp(x),
    "log1p": lambda x, p: math.log1p(x),
    "sqrt": lambda x, p: math.sqrt(x),
    "softplus": lambda x, p: math.log1p(math.exp(x)) if x < 30 else x,
    "leaky_relu": lambda x, p: x if x >= 0 else x * p.get("negative_slope", 0.01),
    "elu": lambda x, p: x if x >= 0 else math.expm1(x),
    "celu": lambda x, p: x if x >= 0 else p.get("alpha", 1.0) * math.expm1(x / p.get("alpha", 1.0)),
    "selu": lambda x, p: 1.0507 * (x if x >= 0 else 1.67326 * math.expm1(x)),
    "gelu": lambda x, p: _gelu(x) if x >= 0 else -0.17,
    "silu": lambda x, p: _silu(x) if x >= 0 else -0.28,
    "logsigmoid": lambda x, p: -math.log1p(math.exp(-x)) if x > -700 else x,
    "tanhshrink": lambda x, p: x - math.tanh(x),
}


def _meta_unsupported(exc: BaseException) -> bool:
    names = {type(e).__name__ for e in (exc, exc.__cause__, exc.__context__) if e is not None}
    text = str(exc)
    return bool(names & {"DataDependentOutputException", "DynamicOutputShapeException",
                         "UnsupportedOperatorException", "GuardOnDataDependentSymNode"}) \
        or "data-dependent" in text or "item()" in text or "cannot be called on meta" in text


def trace_source(source: str, *, catalog: Catalog | None = None,
                 filename: str = "<problem>") -> Trace:
    """Run ``source`` on the meta device and return its trace; raise ``TraceError`` if it fails."""
    catalog = catalog or default_catalog()
    namespace: dict[str, Any] = {"__name__": "kernelmill_problem"}
    try:
        exec(compile(source, filename, "exec"), namespace)  # noqa: S102 — trusted sources only
    except Exception as exc:  # noqa: BLE001
        raise TraceError("import", f"{type(exc).__name__}: {exc}") from None
    recorder = _Recorder(catalog)
    stage = "get_inputs"
    try:
        with torch.device("meta"), recorder:
            inputs = list(namespace["get_inputs"]())
            for i, t in enumerate(inputs):
                if isinstance(t, torch.Tensor):
                    v = recorder.value_of(t)
                    v.depends = frozenset({i})
                    recorder.trace.inputs.append(v)
            stage = "get_init_inputs"
            init_args = list(namespace["get_init_inputs"]())
            recorder.trace.init_args = init_args
            stage = "__init__"
            recorder.phase = "init"
            model = namespace["Model"](*init_args)
            stage = "forward"
            recorder.phase = "forward"
            out = model(*inputs)
            recorder.trace.outputs = [recorder.value_of(t) for t in _tensors(out)]
    except Exception as exc:  # noqa: BLE001
        message = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        raise TraceError(stage, message[:300], unsupported=_meta_unsupported(exc)) from None
    finally:
        sys.modules.pop("kernelmill_problem", None)
    if not recorder.trace.outputs:
        raise TraceError("forward", "forward returned no tensor")
    return recorder.trace
