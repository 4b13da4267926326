"""The terms every judge writes in: one check's verdict (``{"passed": True|False|None, "value",
"detail"}``; ``None``: skipped, never a pass), how a number reads in its detail, and the bounds
of the tolerance an output is read at, per dtype."""
from __future__ import annotations

from typing import Any

# (floor, cap) of the calibrated tolerance per output dtype: the floor is what an honest kernel
# with a different summation order needs; above the cap the problem is too ill-conditioned to grade
# (workers run fp32 as IEEE fp32, TF32 off: harness_worker._ieee_fp32)
TOLERANCE_BOUNDS = {
    "float64": (1e-7, 1e-3),
    "float32": (1e-4, 5e-2),
    "float16": (1e-2, 1e-1),
    "bfloat16": (2e-2, 2e-1),
}


def check(passed: bool | None, value: Any = None, detail: str = "") -> dict:
    return {"passed": passed, "value": value, "detail": detail}


def fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3g}"
