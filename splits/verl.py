"""``kernelmill export PROBLEMS --format verl --out train.parquet``: verl's RL parquet schema.

One row per problem: ``data_source`` ("kernelmill"), ``prompt`` (the chat messages of
``splits.prompt``, Triton unless asked), ``ability`` ("gpu_kernel"), ``reward_model``
(``{"style": "rule", "ground_truth": problem_id}``) and ``extra_info`` (``index``,
``problem_id``, ``name``, ``split``, the ``reference`` source and its ``calibration``: the
dataset's calibration columns). ``kernelmill.grade.service.verl.compute_score`` reads them.
"""
from __future__ import annotations

from pathlib import Path

from kernelmill.grade.problems import (
    CALIBRATION_COLUMNS,
    DISTRIBUTIONS_COLUMN,
    distributions_column,
)

from .prompt import prompt_messages

DATA_SOURCE = "kernelmill"
ABILITY = "gpu_kernel"


def _calibration(record: dict) -> dict:
    validation = record.get("validation") or {}
    out = {}
    for column, key in CALIBRATION_COLUMNS.items():
        value = validation.get(key)
        if column == "calibration_device":
            out[column] = None if value is None else str(value)
        else:
            out[column] = None if value is None or isinstance(value, bool) else float(value)
    out[DISTRIBUTIONS_COLUMN] = distributions_column(validation)
    return out


def verl_rows(problems: dict[str, dict], backend: str = "triton",
              split: str | None = None) -> list[dict]:
    return [{"data_source": DATA_SOURCE,
             "prompt": prompt_messages(record["source"], backend),
             "ability": ABILITY,
             "reward_model": {"style": "rule", "ground_truth": str(pid)},
             "extra_info": {"index": index, "problem_id": str(pid),
                            "name": str(record.get("name") or ""), "split": split or "",
                            "reference": record["source"], "calibration": _calibration(record)}}
            for index, (pid, record) in enumerate(problems.items())]


def verl_schema():
    import pyarrow as pa

    text = pa.string()
    calibration = pa.struct(
        [(column, text if column == "calibration_device" else pa.float64())
         for column in CALIBRATION_COLUMNS] +
        [(DISTRIBUTIONS_COLUMN, pa.list_(pa.struct([("name", text), ("supported", pa.bool_())])))])
    return pa.schema([
        ("data_source", text),
        ("prompt", pa.list_(pa.struct([("role", text), ("content", text)]))),
        ("ability", text),
        ("reward_model", pa.struct([("style", text), ("ground_truth", text)])),
        ("extra_info", pa.struct([("index", pa.int64()), ("problem_id", text), ("name", text),
                                  ("split", text), ("reference", text),
                                  ("calibration", calibration)])),
    ])


def write_verl(problems: dict[str, dict], out: str | Path, backend: str = "triton",
               split: str | None = None) -> int:
    """Write the rows to ``out`` (parquet); how many."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = verl_rows(problems, backend, split)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=verl_schema()), out)
    return len(rows)
