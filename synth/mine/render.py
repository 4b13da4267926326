"""The KernelBench-format source of a mined candidate: the gathered code, a small config object
where the module is config-driven, ``Model`` wrapping the candidate (eval mode: dropout off;
seeded running statistics for its BatchNorm-like layers, which the defaults leave an
identity), ``get_inputs`` over the named size constants ``BATCH``, ``SEQ_LEN``, ``HEIGHT``,
``WIDTH``, ``DEPTH`` (the ones synth/resize.py scales) and ``get_init_inputs``. Also the probe job, the
sizing ladder and the category of a probed problem.
"""
from __future__ import annotations

import re
from typing import Any

from kernelmill.core.input_templates import TEMPLATES
from kernelmill.core.problem import CATEGORIES, guess_category

from ..resize import ResizeError, size_plans
from .gather import Gathered
from .spec import PROBE_DIMS, Guess

# the sizes a source is written at before sizing (each > 8 and a multiple of 8: resizable)
BASE_DIMS = {"BATCH": 16, "SEQ_LEN": 64, "HEIGHT": 64, "WIDTH": 64, "DEPTH": 16}
LADDER = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0)

_CONFIG_CLASS = '''class MinedConfig:
    """A small stand-in for the package's configuration object: its field defaults, shrunk."""

    def __init__(self, **fields):
        self.__dict__.update(fields)

    def get(self, name, default=None):
        return getattr(self, name, default)
'''


RUNNING_STATS = "_mined_running_stats"
_RUNNING_STATS_CODE = f'''def {RUNNING_STATS}(module, seed=0):
    """Running statistics like a trained model's for every normalization layer that keeps them
    (BatchNorm and its kin): in eval mode the defaults, mean 0 and variance 1, leave the layer
    an identity. Drawn on the host from their own seeded generator, so every build on every
    device draws the same (under a device context a host generator cannot draw there)."""
    gen = torch.Generator().manual_seed(seed)
    count = 0
    with torch.no_grad():
        for layer in module.modules():
            mean = getattr(layer, "running_mean", None)
            var = getattr(layer, "running_var", None)
            if isinstance(mean, torch.Tensor) and isinstance(var, torch.Tensor) and \\
                    mean.is_floating_point() and var.is_floating_point():
                mean.copy_(torch.randn(mean.shape, generator=gen, device="cpu").mul_(0.2))
                var.copy_(torch.randn(var.shape, generator=gen, device="cpu").mul_(0.3).exp_())
                count += 1
    return count
'''


def config_code(fields: dict[str, str] | None, added: list[str] = (),
                set_by_probe: dict[str, str] | None = None) -> str:
    """``MinedConfig`` and its ``CONFIG``: the guessed fields, the ones the probe found
    missing (``added``: None) and the values the probe settled on (``set_by_probe``)."""
    if fields is None:
        return ""
    items = dict(fields)
    for name in added:
        items.setdefault(name, "None")
    items.update(set_by_probe or {})
    body = "".join(f"    {k!r}: {v},\n" for k, v in sorted(items.items()))
    return f"\n\n{_CONFIG_CLASS}\n\nCONFIG = {{\n{body}}}\n"


def probe_job(key: str, gathered: Gathered, guess: Guess, kind: str) -> dict[str, Any]:
    code = gathered.code + config_code(guess.config)
    if kind == "class":
        code += f"\n\n{_RUNNING_STATS_CODE}"
    return {"key": key, "code": code, "target": gathered.name,
            "kind": kind, "init": guess.init, "inputs": guess.inputs, "channel": guess.channel,
            "dims": dict(PROBE_DIMS)}


def _input_expr(spec: dict, template: str, width: int, target: str = "same", high: int = 0,
                last: int = 0) -> str | None:
    if spec["kind"] == "mask":
        return None
    if spec["kind"] == "tuple":  # one tensor of the tuple; the template's C is its last dim
        dims = ", ".join(str(last or width) if d == "C" else d for d in TEMPLATES[template])
        return f"torch.randn({dims})"
    if spec["kind"] == "target" and target == "index":
        dims = ", ".join(d for d in TEMPLATES[template] if d != "C")
        return f"torch.randint(0, {max(2, width)}, ({dims},))"
    if spec["kind"] == "long":
        return f"torch.randint(0, {max(2, high or width)}, (BATCH, SEQ_LEN))"
    dims = ", ".join(str(width) if d == "C" else d for d in TEMPLATES[template])
    return f"torch.{'rand' if spec['kind'] == 'prob' else 'randn'}({dims})"


def _docstring(meta: dict[str, Any], category: str, level: int) -> str:
    first = f"{meta['name']} from {meta['package']}"
    if meta.get("version"):
        first += f" {meta['version']}"
    first += f" ({meta['module']}, line {meta['line']}), mined."
    return f'"""{first}\n\ncategory: {category}\nlevel: {level}\n"""\n'


def render(gathered: Gathered, guess: Guess, probe: dict[str, Any], kind: str,
           meta: dict[str, Any], category: str = "other", level: int = 1,
           sizes: dict[str, int] | None = None) -> str:
    """The problem source at the base sizes (``BASE_DIMS``), or at ``sizes`` (a plan of
    ``ladder``: the values synth/resize.py would write, so no libcst pass over the whole
    source is needed to apply it)."""
    template, width = probe["template"], int(probe["width"])
    names, exprs, call_args = [], [], []
    for spec in probe["inputs"]:
        name = re.sub(r"\W", "_", spec["name"])
        name = name if name not in ("self", "torch", "nn", "F") else f"{name}_"
        expr = _input_expr(spec, template, width, probe.get("target", "same"),
                           int(probe.get("high") or 0), int(probe.get("last") or 0))
        if spec["kind"] == "tuple":  # passed as its tensors, called with the tuple
            parts = [f"{name}_{i}" for i in range(spec["count"])]
            names += parts
            exprs += [expr] * len(parts)
            arg = f"({', '.join(parts)})"
        else:
            names.append(name)
            exprs.append(expr)
            arg = name if expr is not None else "None"
        call_args.append(f"{spec['name']}={arg}" if spec.get("optional") else arg)
    passed = [n for n, e in zip(names, exprs) if e is not None]
    call_args.sort(key=lambda a: "=" in a)  # keyword inputs after the positional ones
    init_args = ", ".join(f"{n}={e}" if kw else e for n, kw, e in probe["init"])
    output = probe.get("output") or ""
    used = [d for d in BASE_DIMS if any(e and re.search(rf"\b{d}\b", e) for e in exprs)]
    stats = kind == "class" and bool(probe.get("running_stats"))
    lines = [_docstring(meta, category, level), gathered.code.rstrip("\n"),
             config_code(guess.config, probe.get("config_added", []),
                         probe.get("config_set")).rstrip("\n"), "", ""]
    if stats:
        lines += [_RUNNING_STATS_CODE.rstrip("\n"), "", ""]
    probed = probe.get("dims") or {}
    base = {d: max(BASE_DIMS[d], int(probed.get(d, 0))) for d in used}
    base.update({d: v for d, v in (sizes or {}).items() if d in base})
    lines += [f"{d} = {v}" for d, v in base.items()] + ["", ""]
    lines.append("class Model(nn.Module):")
    lines.append(f'    """{meta["qualname"]} ({meta["package"]}), in eval mode."""\n')
    if kind == "class":
        lines += ["    def __init__(self):", "        super().__init__()",
                  f"        self.mined = {gathered.name}({init_args})", "        self.eval()"]
        lines += [f"        {RUNNING_STATS}(self.mined)"] if stats else []
        lines += [""]
        call = f"self.mined({', '.join(call_args)})"
    else:
        kwargs = ", ".join(f"{n}={e}" for n, _, e in probe["init"])
        lines += ["    def __init__(self):", "        super().__init__()", ""]
        call = f"{gathered.name}({', '.join(call_args + ([kwargs] if kwargs else []))})"
    lines += [f"    def forward(self, {', '.join(passed)}):", f"        return {call}{output}",
              "", ""]
    lines += ["def get_inputs():"]
    lines += [f"    {n} = {e}" for n, e in zip(names, exprs) if e is not None]
    lines += [f"    return [{', '.join(passed)}]", "", "", "def get_init_inputs():",
              "    return []", ""]
    return "\n".join(lines)


def ladder(source: str) -> list[tuple[float, dict[str, int]]]:
    """(factor, size-constant values) for each step of ``LADDER`` (synth/resize.py's plan)."""
    try:
        return size_plans(source, LADDER)
    except ResizeError:
        return []


_GROUPS = (
    ("attention", re.compile(r"scaled_dot_product|_flash_attention|_efficient_attention")),
    ("convolution", re.compile(r"convolution|conv\d|conv_transpose|_conv_depthwise")),
    ("matmul", re.compile(r"^(mm|addmm|bmm|baddbmm|matmul|linear|einsum|_scaled_mm|addbmm)$")),
    ("normalization", re.compile(r"norm|_batch_norm")),
    ("pooling", re.compile(r"pool")),
    ("loss", re.compile(r"loss|nll|cross_entropy|kl_div|binary_cross")),
)
_ACTIVATIONS = re.compile(r"relu|gelu|silu|sigmoid|tanh|elu|mish|softplus|hardswish|"
                          r"hardsigmoid|hardtanh|leaky|selu|softmax|log_softmax|glu|prelu")
_REDUCTIONS = re.compile(r"^(sum|mean|amax|amin|max|min|prod|var|std|cumsum|logsumexp|norm|"
                         r"argmax|argmin|var_mean|std_mean|linalg_vector_norm)$")


def categorize(ops: list[str], name: str, source: str) -> tuple[str, int]:
    """(category, level) from the aten ops the forward ran (op bases), or the name's hints."""
    by_name = guess_category(name, "")
    if not ops:
        category = guess_category(name, source)
        return (category if category in CATEGORIES else "other"), 1
    groups = []
    for label, pattern in _GROUPS:
        if any(pattern.search(op) for op in ops):
            groups.append(label)
    if "attention" not in groups and "matmul" in groups and any("softmax" in op for op in ops) \
            and re.search(r"attn|attention", name.lower()):
        groups.insert(0, "attention")
    if re.search(r"loss", name.lower()):
        return "loss", 1 if len(ops) <= 8 else 2
    n = len(ops)
    if by_name != "other" and (by_name in groups or not groups) and len(groups) <= 1:
        return by_name, 1 if n <= 4 else 2
    if not groups:
        if any(_ACTIVATIONS.search(op) for op in ops):
            return ("activation" if n <= 4 else "fused"), (1 if n <= 4 else 2)
        if any(_REDUCTIONS.match(op) for op in ops):
            return ("reduction" if n <= 4 else "fused"), (1 if n <= 4 else 2)
        return ("elementwise" if n <= 6 else "other"), 1
    if n > 40 or len(groups) >= 3:
        return "block", 3
    if len(groups) == 1 and n <= 4:
        return groups[0], 1
    if groups[0] == "attention":
        return "attention", 2
    return "fused", 2
