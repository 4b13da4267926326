"""A reward function with the signature TRL's ``GRPOTrainer`` calls.

    from kernelmill.grade.trl import make_reward_fn
    trainer = GRPOTrainer(..., reward_funcs=[make_reward_fn(device="cuda", reward="composite")])

The trainer calls ``reward_fn(prompts, completions, **columns)`` with the dataset's other
columns as lists aligned with the completions; the reference problem's source is read from the
``reference`` column (or ``source``, the column name of kernelmill datasets). A completion is a
string or a chat list of messages; its last fenced Python code block is the candidate (the whole
text when it has no fence). Each candidate is graded by the same harness as ``kernelmill
grade``; reference runs are cached for the life of the process.

Optional LLM judge (seed study 003): ``r' = r + λ·J`` with ``J`` in [0, 1] from any
OpenAI-compatible endpoint (``JudgeConfig``; default λ = 0.5). The judge only adds to the reward
of a submission that was not flagged for a hack, and its failure adds nothing.
"""
from __future__ import annotations

import logging
import os
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from kernelmill.core.devices import device_slots

from .grader import Grader, ReferenceError
from .policy import Policy
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


def make_reward_fn(*, device: str = "auto", reward: str = "composite",
                   policy: Policy | None = None, judge: JudgeConfig | None = None,
                   workers: int | None = None, reference_column: str | None = None,
                   verdicts: list | None = None):
    """Build a ``reward_fn(prompts, completions, **kwargs) -> list[float]`` for TRL."""
    grader = Grader(device, policy=policy)
    reward_fn_ = get_reward(reward)
    slots = device_slots(grader.device, workers)

    def grade_one(index: int, reference: str, completion, record: dict | None = None
                  ) -> tuple[float, dict]:
        code = extract_code(completion_text(completion))
        slot = slots[index % len(slots)]
        try:
            verdict = grader.grade(reference, code, record=record, reward=reward,
                                   slot_env=slot.get("env"))
        except ReferenceError as exc:
            verdict = {"compiled": False, "correct": False, "hacks": [], "reward": 0.0,
                       "error": {"stage": "reference", "message": str(exc)}}
        score = float(verdict.get("reward", reward_fn_(verdict)))
        if judge is not None and not verdict.get("hacks"):
            j = judge_score(judge, reference, code)
            verdict["judge"] = j
            if j is not None:
                score += judge.weight * j
        return score, verdict

    def reward_fn(prompts, completions, **kwargs) -> list[float]:
        column = reference_column or next((c for c in REFERENCE_COLUMNS if c in kwargs), None)
        if column is None:
            raise KeyError(f"no reference column: expected one of {REFERENCE_COLUMNS} among "
                           f"{sorted(kwargs)}")
        references = kwargs[column]
        records = _records_from_columns(kwargs, len(completions))
        with ThreadPoolExecutor(max_workers=len(slots)) as pool:
            results = list(pool.map(grade_one, range(len(completions)), references,
                                    completions, records))
        if verdicts is not None:
            verdicts.extend(v for _s, v in results)
        return [s for s, _v in results]

    reward_fn.__name__ = f"kernelmill_{reward}"
    return reward_fn


_DEFAULT = []


def _records_from_columns(columns: dict, n: int) -> list[dict | None]:
    """The calibrated tolerances (and roofline bound) a published dataset carries per row."""
    names = [c for c in ("atol", "rtol", "roofline_ms") if c in columns]
    records: list[dict | None] = []
    for i in range(n):
        values = {c: columns[c][i] for c in names if columns[c][i] is not None}
        records.append({"validation": values} if values else None)
    return records


def reward_fn(prompts, completions, **kwargs) -> list[float]:
    """The composite reward on the default device (``KERNELMILL_DEVICE``, else auto)."""
    if not _DEFAULT:
        _DEFAULT.append(make_reward_fn(device=os.environ.get("KERNELMILL_DEVICE", "auto")))
    return _DEFAULT[0](prompts, completions, **kwargs)
