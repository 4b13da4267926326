"""What the mine probe reads from its errors to repair its guesses (worker side: torch and
the standard library only): the value of a config field by its name (``config_value``), the
feature widths and ranks an error message asks for, the input a failed unpacking named, and
the head width of a rotary ``(cos, sin)`` pair. Moved out of ``mine_worker``.
"""
from __future__ import annotations

import dis
import re

import torch

_NDIM = {"4d": 4, "3d": 3, "2d": 2, "3c": 3, "5d": 5}


# a config field the guesses lack, or left None, by its name (spec.py's shrunk sizes)
_CONFIG_VALUES = (
    # rotary embeddings read their type and base from it (``config.rope_parameters["rope_type"]``)
    (r"^rope_(parameters|scaling)$", "{'rope_type': 'default', 'rope_theta': 10000.0}"),
    (r"^head_dim$|_head_dim$|kv_channels", "16"), (r"eps$", "1e-06"),
    (r"drop|dropout", "0.0"), (r"(^|_)act($|_)|activation", "'gelu'"),
    (r"vocab", "1000"), (r"intermediate|ffn|d_ff|mlp_dim|inner", "128"),
    (r"kv_heads|key_value_heads", "2"), (r"heads", "4"), (r"experts_per_tok|top_k", "2"),
    (r"experts", "4"), (r"layers|depth", "2"), (r"(^|_)num_channels$", "3"),
    (r"patch", "4"), (r"hidden|d_model|embed|(^|_)dim$|width|size$|channels|features", "64"),
    (r"max_position|positions|max_len|seq_len", "512"), (r"^num_|_num$|count", "2"),
)


def config_value(name: str) -> str:
    """A config field's value (Python literal text) by its name; ``"None"`` when unknown."""
    for pattern, value in _CONFIG_VALUES:
        if re.search(pattern, name.lower()):
            return value
    return "None"


def _width_hints(message: str, current: int) -> list[int]:
    """Feature widths an error message asks for."""
    found: list[int] = []
    patterns = (r"to have (\d+) channels", r"expected input with shape \[\*, (\d+)\]",
                r"should contain (\d+) elements", r"normalized_shape=\[(\d+)\]",
                r"size of tensor b \((\d+)\)", r"size of tensor a \((\d+)\)",
                r"\(\d+x(\d+) and (\d+)x\d+\)", r"weight of size \[\d+, (\d+)",
                r"expected (\d+) channels",
                (r"input.size\(-1\) must be equal to input_size. Expected (\d+)"),
                r"divisible by (\d+)", r"shape '\[[^\]]*\]' is invalid")
    for pattern in patterns:
        for match in re.finditer(pattern, message):
            for group in match.groups():
                if group and group.isdigit():
                    value = int(group)
                    if value != current and 0 < value <= 4096:
                        found.append(value)
    return found


def _unpacked(exc: BaseException, values: list) -> int | None:
    """The index in ``values`` of the input whose unpacking raised ``exc`` (``cos, sin =
    position_embeddings`` given one tensor): the name the failing ``UNPACK_SEQUENCE`` of the
    innermost frame loaded, looked up among that frame's locals; None when not one of them."""
    tb = exc.__traceback__
    if tb is None:
        return None
    while tb.tb_next is not None:
        tb = tb.tb_next
    code, lasti = tb.tb_frame.f_code, tb.tb_lasti
    previous = None
    for instruction in dis.get_instructions(code):
        if instruction.offset == lasti:
            if instruction.opname != "UNPACK_SEQUENCE" or previous is None or \
                    not previous.opname.startswith("LOAD_"):
                return None
            value = tb.tb_frame.f_locals.get(previous.argval, _unpacked)
            return next((i for i, v in enumerate(values) if v is value), None)
        previous = instruction
    return None


def _head_dim(model, ns: dict, width: int) -> int:
    """The per-head width a rotary ``(cos, sin)`` pair is made at: the module's (or its first
    submodule's) ``head_dim``, else the config's, else its hidden size over its heads."""
    if isinstance(model, torch.nn.Module):
        for module in model.modules():
            value = getattr(module, "head_dim", None)
            if isinstance(value, int) and value > 0:
                return value
    config = ns.get("CONFIG") or {}
    value = config.get("head_dim")
    if isinstance(value, int) and value > 0:
        return value
    hidden, heads = config.get("hidden_size"), config.get("num_attention_heads")
    if isinstance(hidden, int) and isinstance(heads, int) and heads > 0 and hidden % heads == 0:
        return hidden // heads
    return width


def _rank_hints(message: str) -> list[int]:
    found = []
    for pattern in (r"expected (\d)D", r"Expected (\d)D", r"\(expected (\d)", r"got (\d)D",
                    r"expected (\d) dims", r"(\d)D \(batched\)"):
        for match in re.finditer(pattern, message):
            found.append(int(match.group(1)))
    return found
