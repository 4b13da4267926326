"""The op catalog: a typed description of the PyTorch operations synthesis may use.

Loaded from ``data/ops.json``. Each entry says

- how the op is called (``call``: a template over ``{x}``, ``{y}`` and its parameters; main ops
  give ``main_call``, their ``inputs``, symbolic ``dims``, ``out_shape`` and ``flops``),
- which names it goes by (``names``: qualified names libcst's ``QualifiedNameProvider`` reports;
  ``trace``: the ``__name__`` a ``TorchFunctionMode`` sees when it is not the op's own name),
- the inputs it accepts (``min_rank``/``rank``, ``dtypes``), how it maps an input shape to an
  output shape (``shape``: same, reduce, same_dim, pool, adaptive, halve_last), its parameters with
  valid values (``params``), whether it reduces (``reduces``),
- what keeps it non-degenerate: the input distribution (``input``), what it requires of its input
  (``requires``: signed, positive, nonneg, unsaturated, small_scale), the range of its output
  (``out``), its clamp ``bounds``, whether applying it twice is redundant (``idempotent``), and the
  group of ops it may be swapped with (``swap``).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from kernelmill.core.errors import KernelmillError
from kernelmill.data import DATA_DIR

CATALOG_PATH = DATA_DIR / "ops.json"
FLOAT_DTYPES = ("float32", "float16", "bfloat16")
GROUPS = ("elementwise", "activation", "reduction", "normalization", "linalg", "convolution",
          "pooling", "attention", "indexing", "loss")
SHAPE_RULES = ("same", "reduce", "same_dim", "pool", "adaptive", "halve_last")


@dataclass(frozen=True)
class Op:
    name: str
    group: str
    title: str
    roles: tuple[str, ...] = ()
    call: str | None = None
    names: tuple[str, ...] = ()
    trace: str | None = None
    arity: int = 1
    sig: tuple[str, ...] = ("x",)
    min_rank: int = 1
    rank: int | None = None
    dtypes: tuple[str, ...] = FLOAT_DTYPES
    shape: str = "same"
    params: dict[str, dict[str, Any]] = field(default_factory=dict)
    defaults: dict[str, Any] = field(default_factory=dict)
    reduces: bool = False
    scan: bool = False
    final: bool = False
    input: dict[str, Any] = field(default_factory=lambda: {"dist": "randn", "scale": 1.0})
    out: str = "keep"
    requires: str = "any"
    bounds: tuple[Any, Any] | None = None
    idempotent: bool = False
    swap: str | None = None
    module: str | None = None
    module_class: str | None = None
    attr: str | None = None
    spatial: int = 0
    norm_dims: str | None = None
    main_input: str | None = None
    target: dict[str, Any] | None = None
    second: bool = False
    # main ops
    category: str | None = None
    dims: dict[str, Any] = field(default_factory=dict)
    init: tuple[str, ...] = ()
    modules: dict[str, str] = field(default_factory=dict)
    inputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    main_call: str | None = None
    gate_call: str | None = None
    out_shape: tuple[str, ...] = ()
    flops: str = "0"
    extra_bytes: str = "0"
    value: str = "keep"

    @property
    def trace_name(self) -> str:
        return self.trace or self.name

    def has_role(self, role: str) -> bool:
        return role in self.roles


_TUPLE_FIELDS = ("roles", "names", "sig", "dtypes", "init", "out_shape", "bounds")


def _op_from_dict(data: dict[str, Any], where: str) -> Op:
    known = {f for f in Op.__dataclass_fields__}
    unknown = set(data) - known
    if unknown:
        raise KernelmillError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    data = dict(data)
    for key in _TUPLE_FIELDS:
        if key in data and data[key] is not None:
            data[key] = tuple(data[key])
    op = Op(**data)
    if op.group not in GROUPS:
        raise KernelmillError(f"{where}: unknown group {op.group!r}")
    if op.shape not in SHAPE_RULES:
        raise KernelmillError(f"{where}: unknown shape rule {op.shape!r}")
    if op.has_role("main") and not (op.main_call or op.main_input):
        raise KernelmillError(f"{where}: a main op needs main_call or main_input")
    if (op.has_role("epilogue") or op.has_role("merge") or op.has_role("loss")) and not op.call:
        raise KernelmillError(f"{where}: op {op.name} has no call template")
    return op


class Catalog:
    """All ops, indexed by name, by qualified name and by traced function name."""

    def __init__(self, ops: list[Op]):
        self.ops = {op.name: op for op in ops}
        self.by_qualname: dict[str, list[Op]] = {}
        self.by_trace: dict[str, list[Op]] = {}
        for op in ops:
            for qn in op.names:
                self.by_qualname.setdefault(qn, []).append(op)
            self.by_trace.setdefault(op.trace_name, []).append(op)

    def __len__(self) -> int:
        return len(self.ops)

    def __getitem__(self, name: str) -> Op:
        return self.ops[name]

    def __contains__(self, name: object) -> bool:
        return name in self.ops

    def with_role(self, role: str) -> list[Op]:
        return [op for op in self.ops.values() if op.has_role(role)]

    def swap_group(self, op: Op) -> list[Op]:
        """Ops that may replace ``op`` (same swap group, same arity), ``op`` excluded."""
        if not op.swap:
            return []
        return [o for o in self.ops.values()
                if o.swap == op.swap and o.name != op.name and o.arity == op.arity]

    def lookup(self, qualname: str) -> Op | None:
        """The op a qualified name (``torch.nn.functional.relu``) stands for, if any."""
        ops = self.by_qualname.get(qualname)
        return ops[0] if ops else None

    def for_trace(self, func_name: str) -> Op | None:
        name = func_name.strip("_")
        if name.startswith("r") and name[1:] in ("add", "sub", "mul", "truediv", "div"):
            name = name[1:]
        if name == "truediv":
            name = "div"
        ops = self.by_trace.get(name) or self.by_trace.get(func_name)
        if not ops:
            return None
        return next((op for op in ops if op.name == name), ops[0])


def load_catalog(path: str | Path = CATALOG_PATH) -> Catalog:
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise KernelmillError(f"{path}: cannot read op catalog: {exc}") from None
    ops = [_op_from_dict(entry, f"{path}: op #{i} ({entry.get('name', '?')})")
           for i, entry in enumerate(data.get("ops", []))]
    return Catalog(ops)


@lru_cache(maxsize=1)
def default_catalog() -> Catalog:
    return load_catalog()
