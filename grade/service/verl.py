"""verl reward functions that grade through the service.

In verl's config (``custom_reward_function.path`` = this file's path in the installed package,
``name`` = ``compute_score``, or ``compute_score_batch`` with ``reward_model.reward_manager=batch``)
and ``KERNELMILL_SERVICE=http://HOST:8100`` (+ ``KERNELMILL_TOKEN``) in the trainer's
environment. The rows are ``kernelmill export --format verl``'s: ``reward_model.ground_truth`` is
the problem id, ``extra_info`` carries the reference and its calibration, so a service without
the dataset still grades them. The score is the verdict's reward, 0.0 where none applies (verl
takes numbers only).
"""
from __future__ import annotations

# absolute imports: verl loads this file by its path, as a module outside any package
from kernelmill.grade.problems import calibration_of_row
from kernelmill.grade.service.client import ServiceClient, ServiceError, score
from kernelmill.grade.trl import extract_code

_CLIENT: list[ServiceClient] = []


def _client() -> ServiceClient:
    if not _CLIENT:
        _CLIENT.append(ServiceClient())
    return _CLIENT[0]


def submission(solution_str: str, ground_truth, extra_info: dict | None) -> dict:
    """The service submission of one verl row's response."""
    info = extra_info or {}
    row = {"submission_id": str(info.get("index", "")), "source": extract_code(solution_str),
           "problem_id": str(ground_truth)}
    if isinstance(info.get("reference"), str):
        row["reference"] = info["reference"]
        row["record"] = {"validation": calibration_of_row(info.get("calibration") or {})}
    return row


def compute_score_batch(data_sources, solution_strs, ground_truths, extra_infos,
                        client: ServiceClient | None = None, **_kwargs) -> list[float]:
    """verl's batch reward manager form: every response of the batch in one request."""
    rows = [submission(s, g, e) for s, g, e in zip(solution_strs, ground_truths, extra_infos)]
    try:
        views = (client or _client()).grade(rows)
    except ServiceError:
        return [0.0] * len(rows)
    return [value if value is not None else 0.0 for value in map(score, views)]


def compute_score(data_source, solution_str, ground_truth, extra_info=None,
                  client: ServiceClient | None = None, **_kwargs) -> float:
    """verl's ``compute_score(data_source, solution_str, ground_truth, extra_info)``."""
    return compute_score_batch([data_source], [solution_str], [ground_truth], [extra_info],
                               client=client)[0]
