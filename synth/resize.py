"""Scale a problem's module-level size constants, keeping the source valid and its formatting.

A KernelBench-format problem states its sizes as module-level integer constants (UPPER_CASE as
the project writes them, lower case as KernelBench does) that ``get_inputs`` /
``get_init_inputs`` use::

    BATCH = 4096   # rows
    VOCAB = 8192

``resize_source`` rewrites those literals (libcst, so comments and layout survive) by a factor, or
to the factor whose largest tensor has at most ``target_numel`` elements. What it scales, and how:

* Only *large* size constants: an ``int`` literal (or a literal-only expression such as
  ``2 ** 20``) assigned once at module level, used by the code (``get_inputs``,
  ``get_init_inputs``, the model; directly or through derived constants), greater than 8, and
  not protected. Protected constants are never changed: names that say kernel,
  stride, padding, dilation, heads, groups, experts, top-k, ...; constants used as a divisor
  (``//``, ``%``, ``/``); constants passed as ``kernel_size=``, ``stride=``, ``num_heads=``, ...
* Rounding keeps divisibility: a scaled value stays a multiple of 8 when it was one, and of every
  divisor-like constant (heads, groups, strides, patch sizes, any constant used as a divisor) that
  divided it. A scaled value never drops below 8, nor below any kernel size (a named constant
  or a literal in a convolution/pooling call), so windows and a few stride-2 stages still fit.
* Afterwards every ``X // Y``, ``X % Y`` and ``X / Y`` over module constants that divided exactly
  before must still divide exactly, and derived constants (``HIDDEN = 4 * DIM``) must stay positive
  and divisible as before; constants feeding a broken relation are frozen and the rest rescaled.

The size that ``target_numel`` and ``shrink_for_cpu`` aim at is the largest tensor that the source
makes visible statically: each tensor that ``get_inputs`` returns (shapes read from
``torch.randn(...)`` and friends without running anything), and, as a stand-in for the weights,
the product of the scalable sizes that ``get_init_inputs`` returns (in x out for a linear layer,
in1 x in2 x out for a bilinear one; heads, groups and kernel sizes do not count). Sources are
never executed, so untrusted (generated) sources can be resized safely.

``resize_source`` raises ``ResizeError`` with the reason when nothing can be resized.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import libcst as cst

# The analysis of the constants and the size estimate live in synth/size_analysis.py and
# synth/size_estimate.py; their names are re-exported here.
from .size_analysis import (  # noqa: F401 — re-exported
    _BINOPS,
    _DIVISOR_KEYWORDS,
    _DIVISOR_TOKENS,
    _KERNEL_KEYWORDS,
    _KERNEL_TOKENS,
    _PROTECTED_KEYWORDS,
    _PROTECTED_TOKENS,
    _SIZE_NAME,
    _SQRT_CALLS,
    _WINDOW_ARG,
    SMALL,
    ResizeError,
    _Analysis,
    _analyze,
    _call_name,
    _divisors_of,
    _environment,
    _eval_number,
    _literal_int,
    _literal_window,
    _names,
    _normalizer,
    _related,
    _token_set,
    _top_function,
    size_constants,
)
from .size_estimate import (  # noqa: F401 — re-exported
    _SAME_AS_FIRST,
    _SHAPE_FACTORIES,
    _depends_on,
    _InputEvaluator,
    _largest,
    _shape_numel,
    _Tensor,
    _Unknown,
    largest_numel,
)

__all__ = ["ResizeError", "ResizeResult", "resize_source", "shrink_for_cpu", "size_constants",
           "largest_numel", "size_plans", "CPU_MAX_NUMEL"]

CPU_MAX_NUMEL = 256 * 1024


@dataclass
class ResizeResult:
    """The rewritten source, the factor applied and each changed constant as (old, new)."""

    source: str
    factor: float
    changes: dict[str, tuple[int, int]] = field(default_factory=dict)
    numel_before: int | None = None  # largest static tensor estimate, before and after
    numel_after: int | None = None


# --------------------------------------------------------------------------------- scaling

def _lcm(values) -> int:
    result = 1
    for v in values:
        result = result * v // math.gcd(result, v)
    return result


def _scaled_values(analysis: _Analysis, names: list[str], factor: float,
                   min_size: int) -> dict[str, int]:
    env = _environment(analysis, {})
    values: dict[str, int] = {}
    for name in names:
        old = analysis.literals[name]
        multiple = _lcm([8] * (old % 8 == 0)
                        + [d for d in _divisors_of(analysis, name, env) if old % d == 0])
        floor = max(min_size, analysis.kernel_floor, SMALL)
        floor = multiple * math.ceil(floor / multiple)
        new = multiple * round(old * factor / multiple)
        new = max(new, min(floor, old))  # a constant already under the floor is not shrunk
        values[name] = new
    return values


def _broken(analysis: _Analysis, values: dict[str, int]) -> set[str]:
    """Scaled constants that feed a divisibility or positivity relation the new values break."""
    old_env = _environment(analysis, {})
    new_env = _environment(analysis, values)
    bad: set[str] = set()

    def deps(node_or_name) -> set[str]:
        names = {node_or_name} if isinstance(node_or_name, str) else _names(node_or_name)
        seen: set[str] = set()
        stack = list(names)
        while stack:
            name = stack.pop()
            if name in seen:
                continue
            seen.add(name)
            if name in analysis.derived:
                stack.extend(_names(analysis.derived[name]))
        return seen & set(values)

    for left, right in analysis.relations:
        try:
            old_l, old_r = _eval_number(left, old_env), _eval_number(right, old_env)
            new_l, new_r = _eval_number(left, new_env), _eval_number(right, new_env)
        except Exception:
            continue
        if not all(isinstance(v, int) for v in (old_l, old_r, new_l, new_r)) or not old_r:
            continue
        if new_r == 0 or (old_l % old_r == 0 and new_l % new_r != 0) \
                or (old_l // old_r > 0 and new_l // new_r <= 0):
            bad |= deps(left) | deps(right)
    for name in analysis.derived:
        old, new = old_env.get(name), new_env.get(name)
        if not isinstance(old, int) or not isinstance(new, int) or isinstance(old, bool):
            continue
        divisor_values = _divisors_of(analysis, name, old_env) if name not in analysis.divisors \
            else []
        if (old > 0 and new <= 0) or any(old % d == 0 and new % d != 0 for d in divisor_values):
            bad |= deps(name)
    return bad


def _plan(analysis: _Analysis, factor: float, min_size: int) -> dict[str, int]:
    names = list(analysis.scalable)
    while names:
        values = _scaled_values(analysis, names, factor, min_size)
        bad = _broken(analysis, values)
        if not bad:
            return values
        names = [n for n in names if n not in bad]
    return {}


class _ResizeConstants(cst.CSTTransformer):
    """Rewrites the value of module-level ``NAME = <int>`` assignments named in ``values``."""

    def __init__(self, values: dict[str, int]):
        super().__init__()
        self.values = values

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False

    def _literal(self, old: cst.BaseExpression, new: int) -> cst.Integer:
        text = f"{new:_}" if isinstance(old, cst.Integer) and "_" in old.value else str(new)
        return cst.Integer(value=text)

    def leave_Assign(self, original: cst.Assign, updated: cst.Assign) -> cst.Assign:
        if len(updated.targets) == 1 and isinstance(updated.targets[0].target, cst.Name):
            name = updated.targets[0].target.value
            if name in self.values:
                return updated.with_changes(value=self._literal(updated.value, self.values[name]))
        return updated

    def leave_AnnAssign(self, original: cst.AnnAssign, updated: cst.AnnAssign) -> cst.AnnAssign:
        if isinstance(updated.target, cst.Name) and updated.value is not None:
            name = updated.target.value
            if name in self.values:
                return updated.with_changes(value=self._literal(updated.value, self.values[name]))
        return updated


def _render(source: str, values: dict[str, int]) -> str:
    module = cst.parse_module(source)
    return module.visit(_ResizeConstants(values)).code


def _refusal(analysis: _Analysis) -> ResizeError:
    if not analysis.skipped:
        return ResizeError("no module-level int size constants")
    kept = ", ".join(f"{n} ({why})" for n, why in analysis.skipped.items())
    return ResizeError(f"no scalable size constant; kept: {kept}")


def _search_factor(analysis: _Analysis, target: int, min_size: int) -> float:
    """Largest factor whose largest tensor estimate is at most ``target`` (or the smallest)."""
    def size(f: float) -> int:
        return _largest(analysis, _plan(analysis, f, min_size)) or 0

    lo, hi = math.log(1e-6), math.log(1e6)
    if size(math.exp(lo)) > target:
        return math.exp(lo)
    for _ in range(50):
        mid = (lo + hi) / 2
        if size(math.exp(mid)) <= target:
            lo = mid
        else:
            hi = mid
    return math.exp(lo)


def resize_source(source: str, *, factor: float | None = None, target_numel: int | None = None,
                  min_size: int = 1) -> ResizeResult:
    """Scale ``source``'s size constants by ``factor`` or towards ``target_numel``.

    With ``target_numel`` the factor is the largest one whose largest tensor (static estimate)
    has at most ``target_numel`` elements; when even the smallest sizes exceed it, the smallest
    sizes are used. ``min_size`` raises the least value a scaled constant may take above the
    built-in floor (8, or the largest kernel size; a constant already below it is not shrunk).
    Raises ``ResizeError`` when the source has no size constant that can be scaled.
    """
    if (factor is None) == (target_numel is None):
        raise ResizeError("give exactly one of factor and target_numel")
    if factor is not None and not (factor > 0 and math.isfinite(factor)):
        raise ResizeError(f"factor must be a positive number, got {factor!r}")
    if target_numel is not None and target_numel < 1:
        raise ResizeError(f"target_numel must be positive, got {target_numel!r}")
    if min_size < 1:
        raise ResizeError(f"min_size must be at least 1, got {min_size!r}")
    analysis = _analyze(source)
    if not analysis.scalable:
        raise _refusal(analysis)
    before = _largest(analysis, {})
    if target_numel is not None:
        if before is None:
            raise ResizeError("cannot tell the input sizes statically from get_inputs()")
        factor = _search_factor(analysis, target_numel, min_size)
    values = _plan(analysis, factor, min_size)
    if not values:
        raise ResizeError("every size constant feeds a divisibility relation that resizing "
                          "would break")
    changes = {n: (analysis.literals[n], v) for n, v in values.items()
               if v != analysis.literals[n]}
    new_source = _render(source, {n: new for n, (_, new) in changes.items()}) if changes \
        else source
    return ResizeResult(source=new_source, factor=float(factor), changes=changes,
                        numel_before=before, numel_after=_largest(analysis, values))


def size_plans(source: str, factors, *, min_size: int = 1) -> list[tuple[float, dict[str, int]]]:
    """(factor, the size constants' values ``resize_source(factor=...)`` would write) for each
    factor, without rewriting the source: a caller that measures each size (mining's sizing
    ladder) overrides the constants in one namespace, then renders only the factor it picks."""
    analysis = _analyze(source)
    if not analysis.scalable:
        raise _refusal(analysis)
    plans = []
    for factor in factors:
        values = _plan(analysis, float(factor), min_size)
        if values:
            plans.append((float(factor), values))
    return plans


def shrink_for_cpu(source: str, max_numel: int = CPU_MAX_NUMEL, *,
                   min_size: int = 1) -> ResizeResult:
    """Shrink a problem so its largest tensor has at most about ``max_numel`` elements.

    Sources that are already small enough come back unchanged (factor 1.0). Raises
    ``ResizeError`` only when the source is too large and nothing in it can be scaled.
    """
    analysis = _analyze(source)
    before = _largest(analysis, {})
    if before is not None and before <= max_numel:
        return ResizeResult(source=source, factor=1.0, changes={}, numel_before=before,
                            numel_after=before)
    if not analysis.scalable:
        raise _refusal(analysis)
    if before is None:
        raise ResizeError("cannot tell the input sizes statically from get_inputs()")
    factor = _search_factor(analysis, max_numel, min_size)
    factor = min(factor, 1.0)
    return resize_source(source, factor=factor, min_size=min_size)
