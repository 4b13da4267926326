"""Print a ``Composition`` as clean KernelBench-format source, assembled with libcst.

The module has a docstring (description, ``category:``, ``level:``), the torch imports,
UPPER_CASE size constants, a ``Model`` whose constructor takes the main layer's sizes (KernelBench
style, fed by ``get_init_inputs``), a forward that reads top to bottom one op per line, and a
``get_inputs`` drawing each input from the distribution that keeps the chain non-degenerate.
"""
from __future__ import annotations

import libcst as cst

from .catalog import Op
from .composer import Axis, Composer, Composition

_BRANCH_TEXT = {"residual": "a residual input added", "skip": "a skip connection around the chain",
                "gate": "a sigmoid gate from a twin layer", "se_scale": "a squeeze-excite style scale"}


def _fmt(value) -> str:
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return value
    return repr(value)


def _shape_args(shape: list[Axis]) -> str:
    return ", ".join(a.expr for a in shape)


def _shape_tuple(shape: list[Axis]) -> str:
    inner = _shape_args(shape)
    return f"({inner},)" if len(shape) == 1 else f"({inner})"


class _Emitter:
    def __init__(self, comp: Composition, composer: Composer):
        self.comp = comp
        self.composer = composer
        self.dtype_kw = "" if comp.dtype == "float32" else ", dtype=DTYPE"
        self.init_lower = {d: d.lower() for d in comp.main.init}
        self.extra_constants: dict[str, int] = {}

    def constant(self, base: str, value: int) -> str:
        name, i = base, 2
        while name in self.extra_constants and self.extra_constants[name] != value:
            name, i = f"{base}_{i}", i + 1
        self.extra_constants[name] = value
        return name

    def axis(self, a: Axis) -> str:
        return self.init_lower.get(a.expr, a.expr)

    def render_module(self, template: str, shape: list[Axis], params: dict) -> str:
        rank = len(shape)
        if rank < 2:
            raise ValueError(f"module template {template!r} needs a rank >= 2 input")
        channel_shape = (self.axis(shape[-1]) if rank == 2
                         else ", ".join([self.axis(shape[1])] + ["1"] * (rank - 2)))
        return template.format(
            last=self.axis(shape[-1]), channels=self.axis(shape[1]) if rank > 1 else "1",
            groups=self.constant("GROUPS", params["groups"]) if "{groups}" in template else 1,
            nd=max(1, rank - 2), channel_shape=channel_shape,
            dtype_kw=self.dtype_kw, dtype_only="dtype=DTYPE" if self.dtype_kw else "")

    def render_call(self, op: Op, var: str, params: dict, attr: str | None) -> str:
        values = {k: _fmt(v) for k, v in params.items()}
        text = op.call.format(x=var, attr=attr or "", **values)
        return text.replace(" + -", " - ").replace(" * -1.0", "").replace("+ -", "- ")

    def input_expr(self, shape: list[Axis], spec: dict | None, *, scale_by: str | None = None) -> str:
        spec = spec or {}
        dist = spec.get("dist", "randn")
        if dist == "randint":
            return f"torch.randint(0, {spec['high']}, {_shape_tuple(shape)})"
        base = "torch.rand" if dist == "rand" else "torch.randn"
        expr = f"{base}({_shape_args(shape)}{self.dtype_kw})"
        if scale_by:
            expr = f"{expr} / {scale_by} ** 0.5"
        scale = spec.get("scale", 1.0)
        if scale != 1.0:
            expr = f"{expr} * {_fmt(float(scale))}"
        if spec.get("shift"):
            expr = f"{expr} + {_fmt(float(spec['shift']))}"
        return expr

    def target_expr(self, loss: Op, shape: list[Axis]) -> str:
        dist = (loss.target or {}).get("dist", "randn")
        to = ".to(DTYPE)" if self.dtype_kw else ""
        if dist == "class_index":
            return f"torch.randint(0, {shape[-1].expr}, {_shape_tuple(shape[:-1])})"
        if dist == "probs":
            return f"torch.softmax(torch.randn({_shape_args(shape)}{self.dtype_kw}), dim=-1)"
        if dist == "binary":
            return f"torch.randint(0, 2, {_shape_tuple(shape)}).float(){to}"
        if dist == "sign":
            return f"(torch.randint(0, 2, {_shape_tuple(shape)}) * 2 - 1).float(){to}"
        if dist == "sign_rows":
            return f"(torch.randint(0, 2, {_shape_tuple(shape[:1])}) * 2 - 1).float(){to}"
        if dist == "counts":
            return f"torch.randint(0, 8, {_shape_tuple(shape)}).float(){to}"
        return f"torch.randn({_shape_args(shape)}{self.dtype_kw})"

    def build(self) -> tuple[list[str], list[str], list[str], list[tuple[str, str]], str]:
        """(init params, init body, forward lines, forward inputs with get_inputs exprs, doc)."""
        comp, main = self.comp, self.comp.main
        composer = self.composer
        inputs, main_out, after = composer.shapes(comp)
        init_params = [self.init_lower[d] for d in main.init]
        init_body: list[str] = []
        fwd: list[str] = []
        fwd_inputs: list[tuple[str, str]] = []
        if main.main_call:
            contracted = main.value.split(":", 1)[1] if main.value.startswith("matmul:") else None
            names = list(main.inputs)
            for name, spec in main.inputs.items():
                scale_by = contracted if contracted and name == names[-1] else None
                fwd_inputs.append((name, self.input_expr(inputs[name], spec, scale_by=scale_by)))
            for attr, template in main.modules.items():
                init_body.append(f"self.{attr} = {template.format(dtype_kw=self.dtype_kw)}")
            var = "x" if "x" in main.inputs else "out"
            if comp.branch == "gate":
                for attr, template in main.modules.items():
                    init_body.append(f"self.{attr}_gate = {template.format(dtype_kw=self.dtype_kw)}")
                fwd.append(f"gate = torch.sigmoid({main.gate_call})")
            fwd.append(f"{var} = {main.main_call}")
        else:
            var = "x"
            spec = main.input if main.name != "loss_input" else {"dist": "randn"}
            fwd_inputs.append(("x", self.input_expr(inputs["x"], spec)))
            if main.name != "loss_input":
                attr = main.attr
                if main.module:
                    init_body.append(f"self.{attr} = "
                                     f"{self.render_module(main.module, inputs['x'], comp.main_params)}")
                fwd.append(f"{var} = {self.render_call(main, var, comp.main_params, attr)}")
        if comp.branch == "skip":
            fwd.append(f"skip = {var}")
        shape = main_out
        for step, shape_after in zip(comp.steps, after):
            if step.op.module:
                init_body.append(f"self.{step.attr} = "
                                 f"{self.render_module(step.op.module, shape, step.params)}")
            fwd.append(f"{var} = {self.render_call(step.op, var, step.params, step.attr)}")
            shape = shape_after
        if comp.branch == "residual":
            fwd_inputs.append(("residual", self.input_expr(shape, {"dist": "randn"})))
            fwd.append(f"{var} = {var} + residual")
        elif comp.branch == "skip":
            fwd.append(f"{var} = {var} + skip")
        elif comp.branch == "gate":
            fwd.append(f"{var} = {var} * gate")
        elif comp.branch == "se_scale":
            fwd.append(f"{var} = {var} * torch.sigmoid({var}.mean(dim=-1, keepdim=True))")
        if comp.loss is not None:
            loss = comp.loss
            extra = {}
            if loss.second:
                fwd_inputs.append(("other", self.input_expr(shape, {"dist": "randn"})))
                extra["other"] = "other"
            fwd_inputs.append(("target", self.target_expr(loss, shape)))
            params = {k: _fmt(v) for k, v in (comp.loss_params or {}).items()}
            fwd.append(f"return {loss.call.format(x=var, target='target', **extra, **params)}")
        else:
            fwd.append(f"return {var}")
        return init_params, init_body, fwd, fwd_inputs, self.description()

    def description(self) -> str:
        comp = self.comp
        if comp.main.name == "loss_input":
            return f"{comp.loss.title.capitalize()} over a batch of predictions."
        head = comp.main.title
        if not comp.main.main_call:
            head = f"{head} over a {'x'.join(str(v) for v in comp.dims.values())} input"
        parts = [s.op.title for s in comp.steps]
        text = head[0].upper() + head[1:]
        if parts:
            text += " followed by " + (", ".join(parts[:-1]) + " and " + parts[-1]
                                       if len(parts) > 1 else parts[0])
        if comp.branch:
            text += f", with {_BRANCH_TEXT[comp.branch]}"
        if comp.loss is not None:
            text += f", reduced to a {comp.loss.title} loss"
        if comp.dtype != "float32":
            text += f" ({comp.dtype})"
        return text + "."


def _stmt(code: str) -> cst.BaseStatement:
    return cst.parse_statement(code + "\n")


def _function(name: str, params: list[str], body: list[str], *, method: bool,
              leading_blank: int) -> cst.FunctionDef:
    all_params = (["self"] if method else []) + params
    return cst.FunctionDef(
        name=cst.Name(name),
        params=cst.Parameters(params=[cst.Param(cst.Name(p)) for p in all_params]),
        body=cst.IndentedBlock(body=[_stmt(line) for line in body]),
        leading_lines=[cst.EmptyLine(indent=False)] * leading_blank)


def emit_source(comp: Composition, composer: Composer) -> tuple[str, str]:
    """(source, name) of a composition."""
    emitter = _Emitter(comp, composer)
    init_params, init_body, fwd, fwd_inputs, description = emitter.build()
    doc = f'"""{description}\n\ncategory: {comp.category}\nlevel: {comp.level}\n"""'
    header = [_stmt(doc), _stmt("import torch"), _stmt("import torch.nn as nn"),
              _stmt("import torch.nn.functional as F")]
    constants = [_stmt(f"{name} = {value}") for name, value in comp.dims.items()]
    constants += [_stmt(f"{name} = {value}") for name, value in emitter.extra_constants.items()]
    if comp.dtype != "float32":
        constants.append(_stmt(f"DTYPE = torch.{comp.dtype}"))
    constants[0] = constants[0].with_changes(leading_lines=[cst.EmptyLine()])
    init = _function("__init__", init_params, ["super().__init__()", *init_body], method=True,
                     leading_blank=0)
    forward = _function("forward", [n for n, _ in fwd_inputs], fwd, method=True, leading_blank=1)
    model = cst.ClassDef(name=cst.Name("Model"),
                         bases=[cst.Arg(cst.parse_expression("nn.Module"))],
                         body=cst.IndentedBlock(body=[init, forward]),
                         leading_lines=[cst.EmptyLine(), cst.EmptyLine()])
    inputs_list = ", ".join(expr for _, expr in fwd_inputs)
    get_inputs = _function("get_inputs", [], [f"return [{inputs_list}]"], method=False,
                           leading_blank=2)
    init_list = ", ".join(comp.main.init)
    get_init_inputs = _function("get_init_inputs", [], [f"return [{init_list}]"], method=False,
                                leading_blank=2)
    module = cst.Module(body=[*header, *constants, model, get_inputs, get_init_inputs])
    name_parts = [comp.main.name if comp.main.name != "loss_input" else "",
                  *(s.op.name for s in comp.steps), comp.branch or "",
                  comp.loss.name if comp.loss else ""]
    name = "_".join(p for p in name_parts if p)
    return module.code, name
