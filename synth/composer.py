"""Compose new problems from the op catalog: a main op, an epilogue chain, optional branches.

A ``Composition`` is a small dataflow graph: one main op (GEMM, bmm, conv, attention, reduction,
normalisation, pooling, gather ...) or a loss, then 1-5 epilogue ops, optionally merged with a
second branch (a residual input, a skip connection around the epilogue, a sigmoid gate from a twin
of the main layer, a squeeze-excite style scale). Every step is shape- and dtype-checked through
the catalog's rules while it is drawn; sizes are then chosen with a roofline cost model so that the
eager program is real GPU work (``target_ms``); synth/emit.py prints it as KernelBench source and
synth/degeneracy.py vets the result.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

from kernelmill.core.canonical import content_hash

from .catalog import Catalog, Op, default_catalog

# What eager PyTorch sustains on the reference GPU (an H100): a sizing model for composed problems,
# not datasheet peaks (those are core.devices.PEAKS, used for the roofline bound).
PEAK_FLOPS = {"float32": 40e12, "float16": 300e12, "bfloat16": 300e12}
BANDWIDTH = 2.5e12
LAUNCH_S = 5e-6
ELEMENT_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "int64": 8}
MAX_TENSOR_NUMEL = 2 ** 28
MAX_TOTAL_BYTES = 6 * 2 ** 30

ROWS_DIMS = [1024, 2048, 4096, 8192, 16384]
CHANNEL_DIMS = [16, 32, 64, 128]
SPATIAL_DIMS = [32, 64, 128]
MAIN_GROUP_WEIGHTS = {"linalg": 0.30, "convolution": 0.22, "attention": 0.08, "reduction": 0.10,
                      "normalization": 0.10, "pooling": 0.04, "indexing": 0.06}
BRANCHES = ("residual", "skip", "gate", "se_scale")


@dataclass
class Axis:
    size: int
    expr: str  # how the source spells it: a constant name, an expression over constants, a literal


@dataclass
class Step:
    """One epilogue op with its drawn parameters and the module attribute it owns (if any)."""

    op: Op
    params: dict[str, Any]
    attr: str | None = None
    module_expr: str | None = None


@dataclass
class Composition:
    main: Op
    dims: dict[str, int]
    main_params: dict[str, Any]
    steps: list[Step]
    branch: str | None
    dtype: str
    loss: Op | None = None
    loss_params: dict[str, Any] = field(default_factory=dict)
    input_shapes: dict[str, list[Axis]] = field(default_factory=dict)
    out_shape: list[Axis] = field(default_factory=list)
    estimated_ms: float = 0.0

    @property
    def signature(self) -> str:
        """Main op + chain + branch, without sizes or parameters: names the family."""
        parts = [self.main.name, *(s.op.name for s in self.steps)]
        if self.loss is not None:
            parts.append(self.loss.name)
        if self.branch:
            parts.append(f"branch:{self.branch}")
        return ">".join(parts)

    @property
    def family(self) -> str:
        return "composed-" + content_hash(self.signature, 12)

    @property
    def category(self) -> str:
        if self.loss is not None and not self.steps and self.main.name == "loss_input":
            return "loss"
        if not self.steps and self.loss is None:
            return {"linalg": "matmul"}.get(self.main.group, self.main.group)
        return "fused"

    @property
    def level(self) -> int:
        if not self.steps and (self.loss is None or self.main.name == "loss_input"):
            return 1
        return 3 if self.branch in ("gate", "se_scale") or len(self.steps) >= 4 else 2

    def operations(self) -> list[dict[str, Any]]:
        ops = [{"op": "compose", "main": self.main.name, "dtype": self.dtype,
                "dims": dict(self.dims), "estimated_ms": round(self.estimated_ms, 4),
                **({"branch": self.branch} if self.branch else {})}]
        ops += [{"op": "epilogue", "name": s.op.name, **s.params} for s in self.steps]
        if self.loss is not None:
            ops.append({"op": "loss", "name": self.loss.name})
        return ops


class CompositionError(Exception):
    """A draw that cannot be completed (no compatible op, no size fits): the caller redraws."""


def _choice(rng: random.Random, values: list) -> Any:
    return values[rng.randrange(len(values))]


def _pretty_float(x: float) -> str:
    return repr(float(x))


class Composer:
    """Draws ``Composition``s; every random choice comes from the ``rng`` passed in."""

    def __init__(self, catalog: Catalog | None = None, *, target_ms: tuple[float, float] = (0.4, 10.0),
                 max_epilogue: int = 5, branch_rate: float = 0.3, loss_rate: float = 0.08,
                 half_rate: float = 0.2):
        self.catalog = catalog or default_catalog()
        self.target_ms = target_ms
        self.max_epilogue = max_epilogue
        self.branch_rate = branch_rate
        self.loss_rate = loss_rate
        self.half_rate = half_rate
        self.mains = self.catalog.with_role("main")
        self.epilogues = self.catalog.with_role("epilogue")
        self.losses = self.catalog.with_role("loss")

    # -- drawing ----------------------------------------------------------------------------
    def draw(self, rng: random.Random) -> Composition:
        if rng.random() < self.loss_rate:
            return self._draw_loss(rng)
        groups = list(MAIN_GROUP_WEIGHTS)
        group = rng.choices(groups, weights=[MAIN_GROUP_WEIGHTS[g] for g in groups])[0]
        candidates = [op for op in self.mains if op.group == group] or self.mains
        main = _choice(rng, candidates)
        dims, params = self._draw_main_dims(main, rng)
        dtype = "float32"
        comp = Composition(main, dims, params, [], None, dtype)
        shape = self.main_output(comp)
        n_steps = rng.randint(1, self.max_epilogue)
        comp.steps = self._draw_chain(shape, n_steps, rng, main)
        if not comp.steps and not main.final:
            raise CompositionError(f"no epilogue fits after {main.name}")
        if comp.steps and rng.random() < self.branch_rate:
            comp.branch = self._draw_branch(comp, rng)
        allowed = set(main.dtypes)
        for s in comp.steps:
            allowed &= set(s.op.dtypes)
        if rng.random() < self.half_rate:
            halves = sorted(allowed & {"float16", "bfloat16"})
            if halves and not any(spec.get("dist") == "randint" for spec in main.inputs.values()):
                comp.dtype = _choice(rng, halves)
        self.fit_size(comp, rng)
        return comp

    def _draw_main_dims(self, main: Op, rng: random.Random) -> tuple[dict[str, int], dict]:
        params: dict[str, Any] = {}
        if main.main_call:
            dims = {}
            for name, spec in main.dims.items():
                dims[name] = 1 if spec == "batch" else int(_choice(rng, list(spec)))
            return dims, params
        # unary main over generated input rows or images
        if main.main_input == "images" or main.min_rank >= 3 or main.spatial:
            dims = {"BATCH": 1, "CHANNELS": _choice(rng, CHANNEL_DIMS),
                    "HEIGHT": _choice(rng, SPATIAL_DIMS), "WIDTH": _choice(rng, SPATIAL_DIMS)}
        elif rng.random() < 0.3:
            dims = {"BATCH": 1, "SEQ_LEN": _choice(rng, [128, 256, 512]),
                    "HIDDEN": _choice(rng, [512, 1024, 2048, 4096])}
        else:
            dims = {"BATCH": 1, "DIM": _choice(rng, ROWS_DIMS)}
        shape = [Axis(v, k) for k, v in dims.items()]
        params = self._draw_params(main, shape, rng)
        if params is None:
            raise CompositionError(f"no parameters fit {main.name}")
        return dims, params

    def main_input_shapes(self, comp: Composition) -> dict[str, list[Axis]]:
        main = comp.main
        if main.main_call:
            return {name: [self._axis(comp, d) for d in spec["shape"]]
                    for name, spec in main.inputs.items()}
        return {"x": [Axis(v, k) for k, v in comp.dims.items()]}

    def _axis(self, comp: Composition, expr: str) -> Axis:
        return Axis(int(eval(expr, {}, dict(comp.dims))), expr)

    def main_output(self, comp: Composition) -> list[Axis]:
        main = comp.main
        if main.main_call:
            return [self._axis(comp, d) for d in main.out_shape]
        shape = [Axis(v, k) for k, v in comp.dims.items()]
        return self.apply_shape(main, shape, comp.main_params)

    def _batch_axis_name(self, comp: Composition) -> str:
        if comp.main.main_call:
            return next(k for k, v in comp.main.dims.items() if v == "batch")
        return "BATCH"

    def _draw_params(self, op: Op, shape: list[Axis], rng: random.Random) -> dict | None:
        params: dict[str, Any] = {}
        for name, spec in op.params.items():
            params[name] = _choice(rng, list(spec["choices"]))
        rank = len(shape)
        if op.module and rank < 2:
            return None
        if rank < max(op.min_rank, 1) or (op.rank is not None and rank != op.rank):
            return None
        if op.shape in ("reduce", "same_dim") or "dim" in op.sig:
            axes = [i for i in range(1, rank) if shape[i].size > 1]  # never the batch axis
            if not axes:
                return None
            axis = _choice(rng, axes)
            params["dim"] = axis - rank if rng.random() < 0.7 else axis
        if op.shape == "pool":
            if rank != op.spatial + 2:
                return None
            if any(a.size < 2 * params["kernel_size"] for a in shape[2:]):
                return None
        if op.shape == "adaptive":
            if rank != op.spatial + 2 or any(a.size < 2 * params["output_size"] for a in shape[2:]):
                return None
        if op.shape == "halve_last" and shape[-1].size % 2:
            return None
        if op.norm_dims == "group":
            if not shape[1].expr.isidentifier():  # resizing keeps GROUPS | CHANNELS only for names
                return None
            groups = [g for g in (4, 8, 16, 32) if shape[1].size % g == 0 and shape[1].size // g >= 2]
            if not groups:
                return None
            params["groups"] = _choice(rng, groups)
        if op.norm_dims == "spatial" and (rank < 3 or math.prod(a.size for a in shape[2:]) < 4):
            return None
        return params

    def apply_shape(self, op: Op, shape: list[Axis], params: dict[str, Any]) -> list[Axis]:
        rank = len(shape)
        if op.shape in ("same", "same_dim"):
            return list(shape)
        if op.shape == "reduce":
            d = params["dim"] % rank
            return shape[:d] + shape[d + 1:]
        if op.shape == "pool":
            k, s = params["kernel_size"], params["stride"]
            return shape[:2] + [Axis((a.size - k) // s + 1, f"({a.expr} - {k}) // {s} + 1"
                                     if k != s else f"{a.expr} // {s}") for a in shape[2:]]
        if op.shape == "adaptive":
            size = params["output_size"]
            return shape[:2] + [Axis(size, str(size)) for _ in shape[2:]]
        if op.shape == "halve_last":
            return shape[:-1] + [Axis(shape[-1].size // 2, f"{shape[-1].expr} // 2")]
        raise CompositionError(f"unknown shape rule {op.shape}")

    def _draw_chain(self, shape: list[Axis], n: int, rng: random.Random, main: Op) -> list[Step]:
        steps: list[Step] = []
        reduced = main.reduces and main.shape == "reduce"
        attrs: set[str] = set(main.modules) | {f"{a}_gate" for a in main.modules}
        if main.attr:
            attrs.add(main.attr)
        sign = _sign_after(main)
        for _ in range(n * 4):
            if len(steps) >= n:
                break
            op = _choice(rng, self.epilogues)
            if op.reduces and op.shape == "reduce" and (reduced or len(shape) < 2):
                continue
            if main.final or (steps and steps[-1].op.name == op.name):
                continue
            if not _sign_ok(op, sign):
                continue
            params = self._draw_params(op, shape, rng)
            if params is None:
                continue
            step = Step(op, params)
            sign = _sign_after(op, sign)
            if op.module:
                base = op.attr or op.name
                attr = base
                i = 2
                while attr in attrs:
                    attr = f"{base}{i}"
                    i += 1
                attrs.add(attr)
                step.attr = attr
            steps.append(step)
            shape = self.apply_shape(op, shape, params)
            reduced = reduced or (op.reduces and op.shape == "reduce")
        return steps

    def _draw_branch(self, comp: Composition, rng: random.Random) -> str | None:
        options = ["residual"]
        _, main_out, after = self.shapes(comp)
        final = after[-1] if after else main_out
        if len(final) >= 2 and final[-1].size > 1:
            options.append("se_scale")
        if all(s.op.shape in ("same", "same_dim") for s in comp.steps):
            options.append("skip")
            if comp.main.gate_call:
                options.append("gate")
        return _choice(rng, options)

    def _draw_loss(self, rng: random.Random) -> Composition:
        loss = _choice(rng, self.losses)
        rank = loss.rank or _choice(rng, [2, 2, 3])
        use_linear = rng.random() < 0.5 and rank == 2 and not loss.second
        if use_linear:
            main = self.catalog["linear"]
            dims = {"BATCH": 1, "IN_FEATURES": _choice(rng, [512, 1024, 2048]),
                    "OUT_FEATURES": _choice(rng, [1000, 2048, 4096])}
            comp = Composition(main, dims, {}, [], None, "float32", loss=loss)
        else:
            if rank == 1:
                dims = {"BATCH": 1}
            elif rank == 2:
                dims = {"BATCH": 1, "DIM": _choice(rng, [1000, 4096, 8192, 16384])}
            else:
                dims = {"BATCH": 1, "SEQ_LEN": _choice(rng, [128, 512]),
                        "DIM": _choice(rng, [512, 1024, 4096])}
            main = loss_input_op()
            comp = Composition(main, dims, {}, [], None, "float32", loss=loss)
        comp.loss_params = {name: _choice(rng, list(spec["choices"]))
                            for name, spec in loss.params.items()}
        self.fit_size(comp, rng)
        return comp

    # -- sizes --------------------------------------------------------------------------------
    def shapes(self, comp: Composition) -> tuple[dict[str, list[Axis]], list[Axis], list[list[Axis]]]:
        """Input shapes, the main output shape, and the shape after each epilogue step."""
        inputs = self.main_input_shapes(comp)
        shape = self.main_output(comp)
        after = []
        for step in comp.steps:
            shape = self.apply_shape(step.op, shape, step.params)
            after.append(shape)
        return inputs, self.main_output(comp), after

    def estimate_ms(self, comp: Composition) -> tuple[float, int, int]:
        """Roofline estimate of eager time, the largest tensor's numel, total input bytes."""
        el = ELEMENT_BYTES[comp.dtype]
        inputs, main_out, after = self.shapes(comp)

        def numel(shape: list[Axis]) -> int:
            return math.prod(a.size for a in shape)

        in_bytes = sum(numel(s) * el for s in inputs.values())
        out_n = numel(main_out)
        largest = max([numel(s) for s in inputs.values()] + [out_n] + [numel(s) for s in after])
        env = dict(comp.dims)
        flops = float(eval(comp.main.flops, {}, env)) if comp.main.main_call else 2.0 * numel(
            next(iter(inputs.values())))
        extra = float(eval(comp.main.extra_bytes, {}, env)) if comp.main.main_call else 0.0
        if comp.main.modules:
            flops = flops * (2 if comp.branch == "gate" else 1)
        seconds = max(flops / PEAK_FLOPS[comp.dtype], (in_bytes + out_n * el + extra) / BANDWIDTH)
        seconds += LAUNCH_S
        prev = out_n
        for shape in after:
            n = numel(shape)
            seconds += (prev + n) * el / BANDWIDTH + LAUNCH_S
            prev = n
        if comp.branch:
            seconds += 3 * prev * el / BANDWIDTH + 2 * LAUNCH_S
        if comp.loss is not None:
            seconds += 3 * prev * el / BANDWIDTH + 3 * LAUNCH_S
        return seconds * 1e3, largest, in_bytes

    def fit_size(self, comp: Composition, rng: random.Random) -> None:
        """Choose the batch size so the estimated eager time lands in ``target_ms``."""
        lo, hi = self.target_ms
        target = math.exp(rng.uniform(math.log(lo), math.log(hi)))
        batch = self._batch_axis_name(comp)
        floor = 1 if batch == "BATCH" else 16
        value = 16
        for _ in range(6):
            comp.dims[batch] = value
            ms, largest, in_bytes = self.estimate_ms(comp)
            if lo <= ms <= hi and abs(math.log(ms / target)) < 0.3:
                break
            per_unit = largest / value
            cap = max(floor, int(MAX_TENSOR_NUMEL / per_unit))
            cap = min(cap, max(floor, int(MAX_TOTAL_BYTES / max(in_bytes / value, 1))))
            new = min(cap, max(floor, int(value * target / ms)))
            if new >= 64:
                new -= new % 16
            elif new > 2:
                new = 2 ** int(math.log2(new))
            if new == value:
                break
            value = new
        comp.dims[batch] = value
        if value * (largest / value if value else 1) > MAX_TENSOR_NUMEL * 1.01:
            raise CompositionError("no batch size fits the memory cap")
        comp.estimated_ms, _, _ = self.estimate_ms(comp)
        comp.input_shapes, _, after = self.shapes(comp)
        comp.out_shape = after[-1] if after else self.main_output(comp)


_NONNEG_OUT = {"unit", "pos", "nonneg", "abs", "square"}


def _sign_after(op: Op, before: str = "signed") -> str:
    """Coarse sign class of an op's output ("signed", "nonneg", "pos"): a cheap pre-filter;
    synth/degeneracy.py has the final word on the emitted source."""
    if op.out in ("pos", "unit"):
        return "pos"
    if op.out in _NONNEG_OUT or (op.out == "clip" and op.bounds and op.bounds[0] == 0.0):
        return "nonneg"
    if op.out == "keep" or (op.out in ("sum", "mean") and before != "signed"):
        return before
    if op.group in ("linalg", "convolution", "attention") and op.main_call:
        return "signed"
    return "signed"


def _sign_ok(op: Op, sign: str) -> bool:
    if op.requires == "signed" or (op.out == "clip" and op.name in ("relu", "relu6")):
        return sign == "signed"
    if op.requires == "positive":
        return sign == "pos"
    if op.requires == "nonneg":
        return sign in ("pos", "nonneg")
    return True


_LOSS_INPUT: Op | None = None


def loss_input_op() -> Op:
    """A pseudo main op for loss problems whose predictions are a plain input."""
    global _LOSS_INPUT
    if _LOSS_INPUT is None:
        _LOSS_INPUT = Op(name="loss_input", group="loss", title="predictions", roles=("main",),
                         main_input="rows", dtypes=("float32", "float16", "bfloat16"))
    return _LOSS_INPUT
