"""The size a reference is graded at: on CPU, the size validation calibrated it at.

Validation shrinks problems on CPU (``synth.resize.shrink_for_cpu``) so a run takes seconds, and
records the factor in ``validation.resized`` (published as ``calibration_scale``); the tolerances
and ``eager_ms`` hold at that size. Grading on CPU does the same: with the record's factor it
rebuilds exactly the calibrated source (``resize_source(factor=...)``); without one it shrinks to
``max_numel`` elements as validation would. On CUDA the reference runs at its published size.
Sources are never executed here (the resizer is static), so untrusted references are safe.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass


@dataclass
class GradingSize:
    source: str
    factor: float | None  # None: the published size
    note: str = ""  # why a CPU reference was not shrunk


def grading_size(reference: str, device: str, record: dict | None = None,
                 max_numel: int | None = None) -> GradingSize:
    if device.startswith("cuda"):
        return GradingSize(reference, None)
    validation = (record or {}).get("validation") or {}
    if validation.get("device") == "cpu" and validation.get("resized") is None and \
            validation.get("checks"):
        # validated on CPU at its declared sizes (small already, or its shrunk sizes broke it)
        return GradingSize(reference, None, "validated on CPU at its declared sizes")
    factor = validation.get("resized")
    if not (isinstance(factor, (int, float)) and not isinstance(factor, bool) and 0 < factor < 1):
        factor = None
    return _cpu_size(reference, None if factor is None else float(factor), max_numel)


@functools.lru_cache(maxsize=256)
def _cpu_size(reference: str, factor: float | None, max_numel: int | None) -> GradingSize:
    from kernelmill.synth.resize import CPU_MAX_NUMEL, ResizeError, resize_source, shrink_for_cpu

    try:
        if factor is not None:
            result = resize_source(reference, factor=factor)
        else:
            result = shrink_for_cpu(reference, max_numel=max_numel or CPU_MAX_NUMEL)
    except ResizeError as exc:
        return GradingSize(reference, None, f"not resized ({exc})")
    except SyntaxError:
        return GradingSize(reference, None)  # the reference run reports it
    resized = result.factor if result.factor and result.factor != 1 else None
    return GradingSize(result.source, resized)
