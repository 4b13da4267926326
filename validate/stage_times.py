"""Where validation's time went: a table of the ``validation.profile`` of many records.

Each validated record carries ``profile``: seconds per stage of each worker (``probe.<stage>``,
``replay.<stage>``, ``<worker>.wall``), the estimator's run (``estimate_s``) and the time spent
waiting for GPU memory (``*_admission_wait_s``). ``stage_table`` sums them over records, so a
benchmark can say what a problem costs and what to make faster.
"""
from __future__ import annotations

import statistics


def stage_totals(records: list[dict]) -> dict[str, list[float]]:
    """Every profile key -> its values over the records that have it."""
    values: dict[str, list[float]] = {}
    for record in records:
        profile = (record.get("validation") or {}).get("profile") or {}
        for key, seconds in profile.items():
            if isinstance(seconds, (int, float)):
                values.setdefault(key, []).append(float(seconds))
    return values


def stage_table(records: list[dict], top: int = 24) -> str:
    """Rows ``key  problems  total s  share  median  max``, largest total first; ``share`` is
    the share of all worker wall time (``*.wall`` and ``estimate_s``)."""
    values = stage_totals(records)
    if not values:
        return "no stage times recorded"
    wall = sum(sum(v) for k, v in values.items() if k.endswith(".wall") or k == "estimate_s")
    rows = [f"{'stage':34}{'problems':>9}{'total s':>10}{'share':>8}{'median s':>10}"
            f"{'max s':>9}"]
    rows.append("-" * len(rows[0]))
    ranked = sorted(values.items(), key=lambda kv: -sum(kv[1]))
    for key, v in ranked[:top]:
        total = sum(v)
        rows.append(f"{key:34}{len(v):>9}{total:>10.1f}{total / wall if wall else 0:>8.1%}"
                    f"{statistics.median(v):>10.2f}{max(v):>9.2f}")
    rows.append(f"worker time per problem: {wall / max(1, len(records)):.1f} s "
                f"over {len(records)} problems")
    return "\n".join(rows)
