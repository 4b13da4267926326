"""First guesses of a candidate's constructor arguments and inputs, read from its signatures
(defaults, annotations, parameter names) and, for config-driven modules, the config class's
field defaults (shrunk to a small model). The probe (``probe_worker``) repairs them from errors.

A guess is data, not code: constructor arguments are Python expressions (text) with ordered
alternatives; inputs are a kind (float, token ids, class indices, probabilities, mask) and
rank templates over the named dimensions BATCH, SEQ_LEN, HEIGHT, WIDTH, DEPTH and a feature
width ``C``. A parameter annotated as a tuple of tensors (``tuple[torch.Tensor, torch.Tensor]``,
``Optional[Tuple[...]]``: rotary ``position_embeddings``, a ``(cos, sin)`` pair) is a ``tuple``
input of that many tensors; an optional one is ``optional`` (passed by keyword, and only once
the forward fails without it).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import libcst as cst

from .index import Definition, PackageIndex, _dotted

# probe sizes: small enough for a CPU forward in milliseconds
PROBE_DIMS = {"BATCH": 2, "SEQ_LEN": 16, "HEIGHT": 32, "WIDTH": 32, "DEPTH": 4}

_INT_HINTS: tuple[tuple[str, list[str]], ...] = (
    (r"num_(channels|features|filters|planes)", ["16", "32", "64", "8"]),
    (r"kernel|ksize|k_size|window|patch", ["3", "1", "2", "7"]),
    (r"stride|dilation", ["1", "2"]),
    (r"pad", ["0", "1"]),
    (r"head", ["2", "4", "1"]),
    (r"group", ["1", "2", "4"]),
    (r"expert|topk|top_k", ["4", "2"]),
    (r"layer|depth|block|num_", ["2", "1"]),
    (r"class|vocab|token|embed_num|num_embeddings", ["100", "10"]),
    (r"ratio|scale|factor|alpha|beta|gamma|eps|prob|drop|temperature|margin|momentum",
     ["1.0", "0.5", "2"]),
    (r"dim|chan|chs|feat|hidden|width|size|plane|in_|out_|d_model|c_|units|emb", ["16", "32",
                                                                                  "8", "3"]),
)
_CALLABLE_HINTS = ((r"norm", ["nn.BatchNorm2d", "nn.LayerNorm"]),
                   (r"act|nonlin", ["nn.ReLU", "nn.GELU"]),
                   (r"layer|block|conv", ["nn.Conv2d", "nn.Linear"]))
_GENERIC = ["16", "2", "None", "True", "(3, 3)", "0.5", "'relu'"]
_TOKEN_INPUTS = re.compile(r"(^|_)(ids|indices|index|idx|tokens?|positions?)$")
_TARGET_INPUTS = re.compile(r"(^|_)(labels?|targets?|gt|y)$")
_TENSOR_NAMES = re.compile(r"^(input\d?|x\d?|y|targets?|labels?|weight|bias|tensor|pred\w*|logits|"
                           r"query|key|value|[qkv]|a|b|var|mean|hidden\w*|features?|boxes\d?|"
                           r"scores|image|img|grad\w*|src|tgt|anchor|positive|negative)$")
_OPTIONAL_INPUTS = re.compile(r"(^|_)(ids|values|states|embeds|features|inputs?)$")
_MASK_INPUTS = re.compile(r"mask|padding")
_PROB_INPUTS = re.compile(r"prob|probs|p$")
# optional tuples of tensors that are state carried between calls, not an input to make
_CARRIED_INPUTS = re.compile(r"past|cache|state|memory|output")
_CONFIG_SHRINK = (
    (r"vocab", 1000), (r"intermediate|ffn_dim|d_ff|mlp_dim|inner", 128),
    (r"num_key_value_heads|kv_heads", 2), (r"head_dim", 16), (r"heads", 4),
    (r"num_hidden_layers|layers|depth", 2), (r"experts_per_tok|top_k", 2),
    (r"experts", 4), (r"hidden_size|d_model|embed_dim|n_embd|dim$|width", 64),
    (r"max_position|n_positions|max_len|seq_len", 512),
)


@dataclass
class Param:
    name: str
    default: str | None  # source text of the default, None when required
    annotation: str
    kind: str = "pos"  # pos | kw | star | starstar
    tensors: int = 0  # annotated as a tuple of this many tensors (0: not such a tuple)


@dataclass
class Guess:
    init: list[dict[str, Any]] = field(default_factory=list)    # {name, kw, options: [expr]}
    config: dict[str, str] | None = None                        # field -> expr text
    inputs: list[dict[str, Any]] = field(default_factory=list)  # {name, kind, ranks}
    channel: list[int] = field(default_factory=list)            # feature widths to try


def parameters(fn: cst.FunctionDef | None, *, method: bool = True) -> list[Param]:
    if fn is None:
        return []
    code = cst.Module([]).code_for_node
    out = []
    params = fn.params
    for group, kind in ((params.posonly_params, "pos"), (params.params, "pos"),
                        (params.kwonly_params, "kw")):
        for p in group:
            out.append(Param(p.name.value, code(p.default) if p.default is not None else None,
                             _dotted(p.annotation.annotation) if p.annotation else "", kind,
                             tensor_tuple(p.annotation.annotation) if p.annotation else 0))
    if method and out and out[0].name in ("self", "cls"):
        out = out[1:]
    if isinstance(params.star_arg, cst.Param):
        out.append(Param(params.star_arg.name.value, "()", "", "star"))
    if params.star_kwarg is not None:
        out.append(Param(params.star_kwarg.name.value, "{}", "", "starstar"))
    return out


def tensor_tuple(node: cst.BaseExpression) -> int:
    """How many tensors an annotation's tuple holds: ``tuple[torch.Tensor, torch.Tensor]``,
    ``Tuple[Tensor, ...]`` (two), ``Optional[...]`` or ``... | None`` of those; 0 for anything
    else."""
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.BitOr):
        sides = [n for n in (node.left, node.right) if not (isinstance(n, cst.Name) and
                                                          n.value == "None")]
        return tensor_tuple(sides[0]) if len(sides) == 1 else 0
    if isinstance(node, cst.SimpleString) and len(node.value) > 2:  # a string annotation
        try:
            return tensor_tuple(cst.parse_expression(node.evaluated_value))
        except (cst.ParserSyntaxError, TypeError):
            return 0
    if not isinstance(node, cst.Subscript):
        return 0
    head = _dotted(node.value).rsplit(".", 1)[-1]
    elements = [e.slice.value for e in node.slice if isinstance(e.slice, cst.Index)]
    if head == "Optional" and len(elements) == 1:
        return tensor_tuple(elements[0])
    if head not in ("tuple", "Tuple") or not elements:
        return 0
    if not _dotted(elements[0]).endswith("Tensor"):
        return 0
    if len(elements) == 2 and isinstance(elements[1], cst.Ellipsis):
        return 2
    return len(elements) if all(_dotted(e).endswith("Tensor") for e in elements) else 0


def method_of(index: PackageIndex, cls: Definition, name: str, depth: int = 0
              ) -> tuple[cst.FunctionDef | None, Definition | None]:
    """``name`` of ``cls`` or of its first package base that defines it."""
    from .candidates import _method

    fn = _method(cls.node, name)
    if fn is not None or depth > 20:
        return fn, cls
    for arg in cls.node.bases:
        base = index.resolve_dotted(cls.module, _dotted(arg.value))
        if isinstance(base, Definition) and base.kind == "class":
            fn, owner = method_of(index, base, name, depth + 1)
            if fn is not None:
                return fn, owner
    return None, None


def _options_for(param: Param) -> list[str]:
    name = param.name.lower()
    if param.annotation in ("bool",):
        return ["True", "False"]
    if param.annotation in ("float",):
        return ["0.5", "1.0"]
    if param.annotation in ("str",):
        return ["'relu'", "'gelu'", "'mean'"]
    if param.annotation.endswith(("Callable", "Module", "LayerType", "Type")):
        for pattern, options in _CALLABLE_HINTS:
            if re.search(pattern, name):
                return options + ["None"]
    found = list(_GENERIC)
    for pattern, options in _INT_HINTS:
        if re.search(pattern, name):
            found = options + [o for o in _GENERIC if o not in options]
            break
    if param.annotation == "int":  # its alternatives are other integers, not None or 'relu'
        found = [o for o in found if o.isdigit()] or found
    return found


def _config_fields(index: PackageIndex, cls: Definition, depth: int = 0) -> dict[str, str]:
    """Class-level annotated fields with literal defaults (transformers' configs), bases first,
    then the ``__init__`` keyword defaults."""
    fields: dict[str, str] = {}
    code = cst.Module([]).code_for_node
    for arg in cls.node.bases:
        base = index.resolve_dotted(cls.module, _dotted(arg.value))
        if isinstance(base, Definition) and base.kind == "class" and depth < 10:
            fields.update(_config_fields(index, base, depth + 1))
    for stmt in cls.node.body.body:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name) \
                        and small.value is not None and _literal(small.value):
                    fields[small.target.value] = code(small.value)
                elif isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(
                        small.targets[0].target, cst.Name) and _literal(small.value):
                    name = small.targets[0].target.value
                    if not name.startswith("_") and name != "model_type":
                        fields[name] = code(small.value)
    init = next((s for s in cls.node.body.body if isinstance(s, cst.FunctionDef)
                 and s.name.value == "__init__"), None)
    for p in parameters(init):
        if p.default is not None and p.kind in ("pos", "kw") and _literal_text(p.default):
            fields[p.name] = p.default
    for key in list(fields):
        for pattern, value in _CONFIG_SHRINK:
            if re.search(pattern, key) and re.fullmatch(r"\d+", fields[key].strip()):
                fields[key] = str(min(int(fields[key]), value))
                break
    return fields


def _module_config(index: PackageIndex, module: str) -> Definition | None:
    """The config class a module works with when a ``config`` parameter is not annotated: the
    one class named ``...Config`` it defines or imports from the package."""
    mod = index.module(module)
    if mod is None:
        return None
    names = [n for n in [*mod.defs, *mod.imports] if n.endswith("Config") and n != "Config"]
    for name in names:
        found = index.resolve(module, name)
        if isinstance(found, Definition) and found.kind == "class":
            return found
    return None


def _literal(node: cst.BaseExpression) -> bool:
    if isinstance(node, (cst.Integer, cst.Float, cst.SimpleString, cst.Imaginary)):
        return True
    if isinstance(node, cst.Name):
        return node.value in ("True", "False", "None")
    if isinstance(node, cst.UnaryOperation):
        return _literal(node.expression)
    if isinstance(node, (cst.Tuple, cst.List)):
        return all(_literal(e.value) for e in node.elements)
    return False


def _literal_text(text: str) -> bool:
    try:
        return _literal(cst.parse_expression(text))
    except cst.ParserSyntaxError:
        return False


def guess_class(index: PackageIndex, cls: Definition) -> Guess:
    guess = Guess()
    init, _ = method_of(index, cls, "__init__")
    forward, _ = method_of(index, cls, "forward")
    widths: list[int] = []
    for p in parameters(init):
        if p.kind in ("star", "starstar"):
            continue
        config_cls = None
        if "config" in p.name.lower() or p.annotation.endswith("Config"):
            found = index.resolve_dotted(cls.module, p.annotation) if p.annotation else \
                _module_config(index, cls.module)
            if isinstance(found, Definition) and found.kind == "class":
                config_cls = found
            if p.default is None or config_cls is not None:
                guess.config = _config_fields(index, config_cls) if config_cls else {}
                guess.config.setdefault("_attn_implementation", "'eager'")
                guess.init.append({"name": p.name, "kw": p.kind == "kw",
                                   "options": ["MinedConfig(**CONFIG)"]})
                hidden = guess.config.get("hidden_size") or guess.config.get("d_model")
                if hidden and hidden.isdigit():
                    widths.append(int(hidden))
                continue
        if p.default is not None:
            continue
        options = _options_for(p)
        guess.init.append({"name": p.name, "kw": p.kind == "kw", "options": options})
        if re.search(r"dim|chan|chs|feat|hidden|width|plane|in_|d_model|emb", p.name.lower()):
            widths.append(int(options[0]) if options[0].isdigit() else 16)
    if forward is None:  # a torch layer's forward (nn.Sequential, nn.Conv2d subclasses)
        guess.inputs = guess_inputs([Param("input", None, "Tensor")], cls.name)
    else:
        guess.inputs = guess_inputs(parameters(forward), cls.name)
    guess.channel = widths
    return guess


def guess_inputs(params: list[Param], owner: str) -> list[dict[str, Any]]:
    inputs = []
    lowered = owner.lower()
    if "3d" in lowered:
        ranks = ["5d", "4d", "3d", "2d"]
    elif "1d" in lowered or "temporal" in lowered:
        ranks = ["3c", "3d", "2d", "4d"]
    elif any(w in lowered for w in ("conv", "2d", "pool", "resnet", "bottleneck", "inception")):
        ranks = ["4d", "3d", "2d", "3c", "5d"]
    elif any(w in lowered for w in ("attention", "attn", "transformer", "mlp", "block", "layer",
                                    "decoder", "encoder", "embedding", "rope", "rotary")):
        ranks = ["3d", "4d", "2d", "3c", "5d"]
    else:
        ranks = ["4d", "3d", "2d", "3c", "5d"]
    for p in params:
        if p.kind in ("star", "starstar"):
            continue
        name = p.name.lower()
        if p.tensors and (p.default is None or not _CARRIED_INPUTS.search(name)):
            inputs.append({"name": p.name, "kind": "tuple", "count": p.tensors, "ranks": ranks,
                           **({"optional": True} if p.default is not None else {})})
            continue
        if p.default is not None:
            continue
        if _TOKEN_INPUTS.search(name):
            kind = "long"
        elif _TARGET_INPUTS.search(name):
            kind = "target"
        elif _MASK_INPUTS.search(name):
            kind = "mask"
        elif _PROB_INPUTS.search(name):
            kind = "prob"
        else:
            kind = "float"
        inputs.append({"name": p.name, "kind": kind, "ranks": ranks})
    first = params[0] if params else None
    if not [s for s in inputs if not s.get("optional")] and first is not None and first.kind == "pos" and first.default == "None" \
            and (_OPTIONAL_INPUTS.search(first.name.lower()) or
                 _TENSOR_NAMES.search(first.name.lower())):
        # every input optional (``forward(self, input_ids=None, ...)``): the first, when its
        # name says it is a tensor
        kind = "long" if _TOKEN_INPUTS.search(first.name.lower()) else "float"
        inputs.insert(0, {"name": first.name, "kind": kind, "ranks": ranks})
    return inputs


def guess_function(fn: Definition) -> Guess:
    guess = Guess()
    params = parameters(fn.node, method=False)
    tensor_params = [p for p in params if p.default is None and p.kind == "pos" and
                     (p.annotation.endswith("Tensor") or
                      (not p.annotation and _TENSOR_NAMES.search(p.name.lower())))]
    others = [p for p in params if p.default is None and p not in tensor_params
              and p.kind in ("pos", "kw")]
    name = fn.name.lower()
    ranks = ["4d", "2d", "3d", "5d"] if any(w in name for w in ("box", "iou", "nms")) \
        else ["4d", "3d", "2d", "5d"]
    guess.inputs = [{"name": p.name, "kind": "long" if _TOKEN_INPUTS.search(p.name.lower())
                     else "target" if _TARGET_INPUTS.search(p.name.lower())
                     else "prob" if "loss" in name and p is tensor_params[0] else "float",
                     "ranks": ranks} for p in tensor_params]
    guess.init = [{"name": p.name, "kw": True, "options": _options_for(p)} for p in others]
    return guess
