"""TRL reward functions that grade through the service: a step's completions in one request.

    from kernelmill.grade.service.trl import service_reward_fn
    trainer = GRPOTrainer(..., reward_funcs=[service_reward_fn("http://HOST:8100")])

``async_service_reward_fn`` is the same as a coroutine (TRL runs async reward functions
concurrently). Each completion's code (``grade.trl.extract_code``) is submitted with the row's
``problem_id`` (a problem the service serves) and its ``reference`` column where the dataset has
one (used when the service does not serve that id), with the row's calibration. The service
groups one problem's completions and grades them together. The reward is the verdict's; it is
``None`` where the reference cannot run or the service could not grade (TRL leaves it out), and
the batch's rates go to ``log_metric`` as ``kernelmill/...`` (``grade.trl.batch_metrics``).
"""
from __future__ import annotations

import asyncio
import logging

from kernelmill.core.record import Verdict

from ..trl import (
    REFERENCE_COLUMNS,
    _records_from_columns,
    batch_metrics,
    completion_text,
    extract_code,
)
from .client import ServiceClient, ServiceError, score

log = logging.getLogger("kernelmill")


def submissions_from_columns(completions: list, columns: dict,
                             problem_column: str = "problem_id") -> list[dict]:
    """One service submission per completion, from the dataset's columns."""
    n = len(completions)
    pids = columns.get(problem_column)
    reference_column = next((c for c in REFERENCE_COLUMNS if c in columns), None)
    if pids is None and reference_column is None:
        raise KeyError(f"no {problem_column!r} or reference column among {sorted(columns)}")
    records = _records_from_columns(columns, n)
    rows = []
    for i, completion in enumerate(completions):
        row = {"submission_id": str(i), "source": extract_code(completion_text(completion))}
        if pids is not None and pids[i] is not None:
            row["problem_id"] = str(pids[i])
        if reference_column is not None:
            row["reference"] = columns[reference_column][i]
            if records[i]:
                row["record"] = records[i]
        rows.append(row)
    return rows


def _answers(client: ServiceClient, rows: list[dict], deadline_s: float | None
             ) -> list[dict]:
    try:
        return client.grade(rows, deadline_s)
    except ServiceError as exc:
        log.warning(f"kernelmill service: {exc}")
        return [{"status": "error", "verdict": None, "error": {"message": str(exc)}}
                for _ in rows]


def service_reward_fn(url: str | None = None, *, token: str | None = None,
                      client: ServiceClient | None = None, problem_column: str = "problem_id",
                      deadline_s: float | None = None, verdicts: list | None = None):
    """``reward_fn(prompts, completions, **columns) -> list[float | None]`` over the service at
    ``url`` (default ``KERNELMILL_SERVICE``); ``verdicts`` collects the batch's verdicts."""
    client = client or ServiceClient(url, token=token)

    def reward_fn(prompts, completions, **kwargs) -> list[float | None]:
        rows = submissions_from_columns(completions, kwargs, problem_column)
        views = _answers(client, rows, deadline_s)
        batch = [view.get("verdict") or Verdict.failure(
                     "service", str((view.get("error") or {}).get("message")), reward=None,
                     grader_failed=True).to_dict() for view in views]
        if verdicts is not None:
            verdicts.extend(batch)
        if callable(kwargs.get("log_metric")):
            for name, value in batch_metrics(batch).items():
                kwargs["log_metric"](f"kernelmill/{name}", value)
        return [score(view) for view in views]

    reward_fn.__name__ = "kernelmill_service"
    return reward_fn


def async_service_reward_fn(url: str | None = None, **options):
    """The same reward as a coroutine function, for TRL's concurrent async rewards."""
    sync = service_reward_fn(url, **options)

    async def reward_fn(prompts, completions, **kwargs) -> list[float | None]:
        return await asyncio.to_thread(sync, prompts, completions, **kwargs)

    reward_fn.__name__ = "kernelmill_service_async"
    return reward_fn
