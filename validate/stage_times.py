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


def grant_seconds(records: list[dict]) -> dict[str, float]:
    """Byte-seconds of GPU memory grants per stage: each worker's stage seconds times the
    grant it held then (the probe's ``memory.need_bytes``, the replay's own
    ``memory.replay.need_bytes``). On a GPU whose admission is full, this is what each stage
    costs the others: a stage that holds a large grant while it waits (for the GPU's timing
    lock, a compile) keeps memory from problems that could run."""
    spent: dict[str, float] = {}
    for record in records:
        validation = record.get("validation") or {}
        profile, memory = validation.get("profile") or {}, validation.get("memory") or {}
        grants = {"probe": memory.get("need_bytes") or 0,
                  "replay": (memory.get("replay") or {}).get("need_bytes") or 0}
        for key, seconds in profile.items():
            worker = key.split(".", 1)[0]
            if worker in grants and isinstance(seconds, (int, float)) and \
                    not key.endswith(".cpu_s"):
                spent[key] = spent.get(key, 0.0) + grants[worker] * float(seconds)
    return spent


def grant_table(records: list[dict], capacity_bytes: int, wall_s: float, top: int = 12) -> str:
    """Where the memory grants' time went, in seconds of the whole budget (byte-seconds over
    ``capacity_bytes``): the workers' walls together against the run's ``wall_s`` say how
    nearly memory bounds the run; the stages below say what holds it."""
    spent = grant_seconds(records)
    if not spent or capacity_bytes <= 0:
        return "no memory grants recorded"
    whole = sum(v for k, v in spent.items() if k.endswith(".wall"))
    held = whole / capacity_bytes
    rows = [(f"the grants held the whole budget {held:.0f} s of the run's {wall_s:.0f} s "
             f"({held / max(wall_s, 1e-9):.0%}); by stage:"),
            f"{'stage':34}{'budget-s':>10}{'share':>8}"]
    for key, value in sorted(spent.items(), key=lambda kv: -kv[1]):
        if key.endswith(".wall"):
            continue
        rows.append(f"{key:34}{value / capacity_bytes:>10.1f}{value / whole if whole else 0:>8.1%}")
        if len(rows) >= top + 2:
            break
    return "\n".join(rows)
