"""A reward function with the signature TRL's ``GRPOTrainer`` calls.

    from datasets import load_dataset
    from trl import GRPOTrainer
    from kernelmill.grade.trl import reward_fn
    trainer = GRPOTrainer(model=..., reward_funcs=[reward_fn],
                          train_dataset=load_dataset("path/or/hub-id")["train"])

The published dataset's ``prompt`` column (``splits/prompt.py``) is what the model sees; the
trainer calls ``reward_fn(prompts, completions, **columns)`` with the dataset's other columns as
lists aligned with the completions. The reference problem's source is read from the
``reference`` column (or ``source``, the column name of kernelmill records), its calibration
from ``atol``/``rtol``/``calibration_scale`` (``roofline_ms`` is carried, not used to judge). A completion is a string or a chat
list of messages; its last fenced Python code block is the candidate (the whole text when it has
no fence). Each candidate is graded by the same harness as ``kernelmill grade`` (on CPU at the
size the dataset calibrated it at); reference runs are cached for the life of the process.
``make_reward_fn(grader=URL or callable)`` grades on other machines.

Following TRL's conventions, the reward is ``None`` where it does not apply (the reference
cannot run), and the batch's compile/correct/hack rates and mean speedup go to the trainer's
metrics through the ``log_metric`` callable it passes.

Optional LLM judge (seed study 003): ``r' = r + λ·J`` with ``J`` in [0, 1] from any
OpenAI-compatible endpoint (``JudgeConfig``; default λ = 0.5). The judge only adds to the reward
of a submission that was not flagged for a hack, and its failure adds nothing.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from kernelmill.core.devices import device_slots
from kernelmill.core.record import Verdict

from .admitted import admitted_grade
from .batch import default_slots_per_gpu, refuse_unknown_switches
from .grader import Grader, ReferenceError
from .policy import Policy
from .problems import CALIBRATION_COLUMNS, DISTRIBUTIONS_COLUMN, calibration_of_row
from .rewards import get_reward

log = logging.getLogger("kernelmill")

_FENCE = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)```", re.DOTALL)
REFERENCE_COLUMNS = ("reference", "source")

JUDGE_PROMPT = """You review a GPU kernel written to replace a PyTorch reference program.
Rate from 0 to 1 how likely the kernel is a genuine, general implementation (not special-cased
to test inputs, not calling back into PyTorch for the main computation, no tricks against
timing), and how clean it is. Answer with one line: SCORE: <number between 0 and 1>.

Reference:
```python
{reference}
```

Kernel:
```python
{candidate}
```"""


def completion_text(completion) -> str:
    """The text of a completion: a string, or the last assistant message of a chat list."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return str(completion.get("content", ""))
    if isinstance(completion, (list, tuple)):
        for message in reversed(completion):
            if isinstance(message, dict) and message.get("role", "assistant") == "assistant":
                return str(message.get("content", ""))
        return completion_text(completion[-1]) if completion else ""
    return str(completion)


def extract_code(text: str) -> str:
    """The last fenced python (or untagged) block; the whole text if there is no fence."""
    blocks = [(lang.lower(), body) for lang, body in _FENCE.findall(text)]
    python = [body for lang, body in blocks if lang in ("python", "py", "python3", "")]
    if python:
        return python[-1]
    return text if not blocks else blocks[-1][1]


@dataclass
class JudgeConfig:
    base_url: str
    model: str
    api_key: str | None = None
    weight: float = 0.5  # λ
    timeout_s: float = 60.0

    def client(self):
        try:
            import openai
        except ImportError as exc:  # pragma: no cover — a declared dependency
            raise ImportError("the LLM judge needs openai: pip install openai") from exc
        return openai.OpenAI(base_url=self.base_url, api_key=self.api_key or
                             os.environ.get("OPENAI_API_KEY", "none"), timeout=self.timeout_s)


_SCORE = re.compile(r"score\s*[:=]\s*([0-9]*\.?[0-9]+)", re.IGNORECASE)


def judge_score(config: JudgeConfig, reference: str, candidate: str, client=None) -> float | None:
    """J in [0, 1] from the endpoint; None if it failed or answered without a score."""
    client = client or config.client()
    try:
        response = client.chat.completions.create(
            model=config.model, temperature=0.0, max_tokens=32,
            messages=[{"role": "user", "content": JUDGE_PROMPT.format(reference=reference,
                                                                      candidate=candidate)}])
        text = response.choices[0].message.content or ""
    except Exception as exc:  # noqa: BLE001 — an unreachable judge adds nothing
        log.warning(f"judge failed: {type(exc).__name__}: {exc}")
        return None
    match = _SCORE.search(text)
    if not match:
        return None
    return min(1.0, max(0.0, float(match.group(1))))


# Worker stages of the candidate's timing loop: a run that timed out there had already returned
# from every checked forward call (a hang in forward times out in "forward").
TIMING_STAGES = frozenset({"timing", "wall:candidate:start", "wall:candidate:end"})


def timed_out_in_timing(verdict: dict) -> bool:
    error = verdict.get("error") or {}
    # the harness's flag, not the message: an answer that raised "timed out" in its timed
    # calls would be graded again untimed, with no window and no unseen-input check
    return (not verdict.get("hacks") and error.get("stage") in TIMING_STAGES
            and error.get("timed_out") is True)


def local_grader(device: str = "auto", policy: Policy | None = None) -> Callable[..., dict]:
    """``grade(reference, code, record=None, reward="composite", slot_env=None) -> verdict`` on
    this machine; a verdict raises ``ReferenceError`` when the reference cannot run.

    A candidate whose timing loop timed out is graded again without timing: when its outputs are
    right the verdict says ``correct: true`` with ``timing_timed_out: true`` (the first run's
    error in ``timing_error``) and no speedup, so a slow correct kernel is told apart from one
    that hangs (which stays ``correct: false``).
    """
    refuse_unknown_switches()  # the service's actors and a TRL reward start here
    grader = Grader(device, policy=policy)
    untimed: list[Grader] = []

    def untimed_again(verdict: dict, reference: str, code: str, record, reward, slot_env):
        if not timed_out_in_timing(verdict) or not grader.policy.time:
            return verdict
        if not untimed:
            untimed.append(Grader(device, policy=dataclasses.replace(grader.policy, time=False)))
        second = untimed[0].grade(reference, code, record=record, reward=reward,
                                  slot_env=slot_env)
        second["timing_timed_out"] = True
        second["timing_error"] = verdict.get("error")
        second["wall_s"] = verdict.get("wall_s", 0) + second.get("wall_s", 0)
        return second

    def group(reference: str, codes: list[str], record: dict | None = None,
              reward: str = "composite", slot_env: dict | None = None,
              slot: dict | None = None) -> list[dict]:
        """Several completions for one problem, timed in one window (``Grader.grade_group``).
        ``slot`` (a GPU's, ``core.devices.device_slots``): the grade holds its share of that
        GPU's memory and of the host's while it runs, as a batch's grade does, so several
        graded at once on one GPU wait for room rather than run out of it."""
        slot = slot or {"env": slot_env or {}}
        verdicts = admitted_grade(
            grader, {"reference": reference, "record": record}, codes, slot,
            lambda sources, held: grader.grade_group(reference, sources, record=record,
                                                     reward=reward, slot_env=slot.get("env"),
                                                     on_references=held))
        return [untimed_again(v, reference, code, record, reward, slot_env)
                for v, code in zip(verdicts, codes)]

    def grade(reference: str, code: str, record: dict | None = None, reward: str = "composite",
              slot_env: dict | None = None, slot: dict | None = None) -> dict:
        return group(reference, [code], record, reward, slot_env, slot)[0]

    grade.device = grader.device
    grade.group = group
    return grade


def http_grader(url: str, timeout_s: float = 900.0) -> Callable[..., dict]:
    """Grade on another machine: POST ``{reference, candidate, record, reward}`` as JSON to
    ``url`` (``python -m kernelmill.grade.serve`` answers it) and read the verdict back."""
    import json
    import urllib.error
    import urllib.request

    def grade(reference: str, code: str, record: dict | None = None, reward: str = "composite",
              slot_env: dict | None = None) -> dict:
        body = json.dumps({"reference": reference, "candidate": code, "record": record,
                           "reward": reward}).encode()
        request = urllib.request.Request(url, data=body,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                answer = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            answer = json.loads(exc.read() or b"{}")
        except (OSError, ValueError) as exc:
            return Verdict.failure("remote", f"{url}: {exc}", reward=None,
                                   grader_failed=True).to_dict()
        if answer.get("reference_failed"):
            raise ReferenceError(str((answer.get("error") or {}).get("message")))
        return answer

    grade.device = url
    return grade


def make_reward_fn(*, device: str = "auto", reward: str = "composite",
                   policy: Policy | None = None, judge: JudgeConfig | None = None,
                   workers: int | None = None, reference_column: str | None = None,
                   verdicts: list | None = None, grader: Callable[..., dict] | str | None = None,
                   group: int | None = None):
    """Build a ``reward_fn(prompts, completions, **kwargs) -> list[float | None]`` for TRL.

    ``grader`` grades elsewhere: a URL of a ``kernelmill.grade.serve`` server, or any callable
    ``(reference, code, record=None, reward=..., slot_env=None) -> verdict`` (a Ray actor's
    method, a job queue's client); by default the candidates are graded on this machine's
    ``device``. The reward is ``None`` (TRL: not applicable) where the reference cannot run or
    the remote grader could not be reached. When TRL passes ``log_metric``, the batch's rates go
    to the trainer's metrics: ``kernelmill/compiled``, ``correct``, ``hacked``,
    ``timing_timed_out``, ``not_applicable`` (shares of the batch), ``speedup_vs_eager``
    (mean over the correct kernels that were timed) and ``timing_imprecise`` (the share of
    those whose timing was not ``precise``). ``group``: completions of one problem in
    a batch are graded together, at most this many at a time, timed in one window (default 1:
    groups trade precision for throughput, see ``grade_file``).
    """
    reward_fn_ = get_reward(reward)
    if grader is None:
        grade = local_grader(device, policy)
        slots = device_slots(grade.device, workers)
        if workers is None and slots[0].get("gpu") is not None:
            # as many grades at once per GPU as the batch grader runs (one at a time left the
            # GPU idle through each grade's reference run and checks), memory admitted per grade
            per_gpu = default_slots_per_gpu(len(slots), group=group or 1)
            slots = [dict(slot) for slot in slots for _ in range(per_gpu)]
    else:  # the remote side places the work; here only requests run in parallel
        grade = http_grader(grader) if isinstance(grader, str) else grader
        slots = [{"env": {}} for _ in range(max(1, workers or 8))]

    # A GRPO batch holds each prompt's completions together: with ``group``, up to that many of
    # one problem are timed in one window (one exclusive hold of the GPU for all of them).
    group_size = group or 1

    def scored(reference: str, code: str, verdict: dict) -> tuple[float | None, dict]:
        if verdict.get("grader_failed"):
            return None, verdict
        score = float(verdict["reward"] if verdict.get("reward") is not None
                      else reward_fn_(verdict))
        if judge is not None and not verdict.get("hacks"):
            j = judge_score(judge, reference, code)
            verdict["judge"] = j
            if j is not None:
                score += judge.weight * j
        return score, verdict

    def grade_chunk(index: int, chunk: list[tuple[str, str, dict | None]]
                    ) -> list[tuple[float | None, dict]]:
        """Completions of one problem (reference, code, record), graded together."""
        reference, _code, record = chunk[0]
        codes = [code for _r, code, _rec in chunk]
        env = slots[index % len(slots)].get("env")
        try:
            if grader is None:  # this machine's: its slot's memory admitted
                verdicts = grade.group(reference, codes, record=record, reward=reward,
                                       slot_env=env, slot=slots[index % len(slots)])
            elif len(codes) > 1 and hasattr(grade, "group"):
                verdicts = grade.group(reference, codes, record=record, reward=reward,
                                       slot_env=env)
            else:
                verdicts = [grade(reference, code, record=record, reward=reward, slot_env=env)
                            for code in codes]
        except ReferenceError as exc:
            failed = Verdict.failure("reference", str(exc), reward=None, reference_failed=True)
            return [(None, failed.to_dict()) for _ in codes]
        return [scored(reference, code, v) for code, v in zip(codes, verdicts)]

    def reward_fn(prompts, completions, **kwargs) -> list[float | None]:
        column = reference_column or next((c for c in REFERENCE_COLUMNS if c in kwargs), None)
        if column is None:
            raise KeyError(f"no reference column: expected one of {REFERENCE_COLUMNS} among "
                           f"{sorted(kwargs)}")
        references = kwargs[column]
        records = _records_from_columns(kwargs, len(completions))
        rows = [(ref, extract_code(completion_text(c)), rec)
                for ref, c, rec in zip(references, completions, records)]
        chunks = _chunks_by_problem(rows, group_size)
        with ThreadPoolExecutor(max_workers=len(slots)) as pool:
            graded = list(pool.map(grade_chunk, range(len(chunks)),
                                   [[rows[i] for i in chunk] for chunk in chunks]))
        results: list = [None] * len(rows)
        for chunk, outcome in zip(chunks, graded):
            for i, result in zip(chunk, outcome):
                results[i] = result
        batch = [v for _s, v in results]
        if verdicts is not None:
            verdicts.extend(batch)
        if callable(kwargs.get("log_metric")):
            for name, value in batch_metrics(batch).items():
                kwargs["log_metric"](f"kernelmill/{name}", value)
        return [s for s, _v in results]

    reward_fn.__name__ = f"kernelmill_{reward}"
    return reward_fn


def batch_metrics(verdicts: list[dict]) -> dict[str, float]:
    """Shares of a batch that compiled, were correct, hacked, timed out in timing or could not
    be graded, the mean speedup over eager of the correct timed kernels and the share of those
    whose timing was not precise (``timing.precise``: its interval wider than the window's
    limit)."""
    n = max(1, len(verdicts))
    metrics = {
        "compiled": sum(bool(v.get("compiled")) for v in verdicts) / n,
        "correct": sum(bool(v.get("correct")) for v in verdicts) / n,
        "hacked": sum(bool(v.get("hacks")) for v in verdicts) / n,
        "timing_timed_out": sum(bool(v.get("timing_timed_out")) for v in verdicts) / n,
        "not_applicable": sum(bool(v.get("reference_failed") or v.get("grader_failed"))
                              for v in verdicts) / n,
    }
    timed = [v for v in verdicts
             if v.get("correct") and isinstance(v.get("speedup_vs_eager"), (int, float))]
    if timed:
        metrics["speedup_vs_eager"] = sum(float(v["speedup_vs_eager"]) for v in timed) / \
            len(timed)
        # of those, the share whose timing's interval stayed wider than the window's limit:
        # their speed term is the reward's noisiest part
        metrics["timing_imprecise"] = sum(
            (v.get("timing") or {}).get("precise") is False for v in timed) / len(timed)
    return metrics


def _chunks_by_problem(rows: list[tuple], size: int) -> list[list[int]]:
    """Indices of ``rows`` (reference, code, record) by problem, at most ``size`` per chunk,
    in order of first appearance."""
    by_problem: dict[str, list[int]] = {}
    for i, (reference, _code, record) in enumerate(rows):
        key = json.dumps([reference, record], sort_keys=True, default=str)
        by_problem.setdefault(key, []).append(i)
    return [indices[start:start + size] for indices in by_problem.values()
            for start in range(0, len(indices), max(1, size))]


_DEFAULT = []


def _records_from_columns(columns: dict, n: int) -> list[dict | None]:
    """The calibration a published dataset carries per row (tolerances, roofline bound, the
    size they hold at), in the record form the grader reads (``grade/problems.py``)."""
    names = [c for c in (*CALIBRATION_COLUMNS, DISTRIBUTIONS_COLUMN) if c in columns]
    records: list[dict | None] = []
    for i in range(n):
        values = calibration_of_row({c: columns[c][i] for c in names})
        records.append({"validation": values} if values else None)
    return records


def reward_fn(prompts, completions, **kwargs) -> list[float]:
    """The composite reward on the default device (``KERNELMILL_DEVICE``, else auto), or by the
    grading server at ``KERNELMILL_GRADER`` (a URL) when that is set."""
    if not _DEFAULT:
        _DEFAULT.append(make_reward_fn(device=os.environ.get("KERNELMILL_DEVICE", "auto"),
                                       grader=os.environ.get("KERNELMILL_GRADER") or None))
    return _DEFAULT[0](prompts, completions, **kwargs)
