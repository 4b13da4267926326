"""Ask an OpenAI-compatible endpoint for new problems in KernelBench format.

``LLMProposer.propose(category, examples)`` sends a system prompt stating the format and the
rules that keep a problem meaningful, a few example problems of the category (few-shot), and asks
for one new problem; ``extract_code`` takes the Python code block out of the answer. The caller
(synth/generate.py) puts the code through the same static checks as every other source.

Endpoint, model and key come from the options or from ``KERNELMILL_LLM_BASE_URL``,
``KERNELMILL_LLM_MODEL`` and ``OPENAI_API_KEY``.
"""
from __future__ import annotations

import ast
import os
from dataclasses import dataclass, field
from typing import Any

from kernelmill.core.errors import KernelmillError
from kernelmill.core.problem import parse

SYSTEM_PROMPT = """You write GPU-kernel benchmark problems as PyTorch reference programs in \
KernelBench format. A problem is one Python module with:
- a module docstring: a one-line description, then a line `category: <category>` and a line \
`level: <1|2|3>`;
- `import torch`, `import torch.nn as nn` (and `torch.nn.functional as F` if used);
- module-level UPPER_CASE integer size constants;
- `class Model(nn.Module)` with `__init__` and `forward` computing the reference result;
- `def get_inputs()` returning a list of random CPU tensors built from the constants;
- `def get_init_inputs()` returning the constructor arguments as a list.
Rules: sizes must make the eager program take 0.3-30 ms on an H100 GPU; forward must be \
deterministic (no dropout, no random numbers); the output must depend on every input and must not \
be constant or saturated (no softmax over a size-1 dim, no ReLU of non-negative values, no sum of \
softmax rows); use only torch. Answer with exactly one ```python code block."""


@dataclass
class LLMConfig:
    """Where and how to ask. ``None`` fields are read from the environment."""

    base_url: str | None = None
    model: str | None = None
    api_key: str | None = None
    temperature: float = 0.8
    max_tokens: int = 3000
    timeout_s: float = 120.0
    n_examples: int = 2
    fraction: float = 0.1  # share of synthesis attempts that ask the LLM
    extra: dict[str, Any] = field(default_factory=dict)

    def resolved(self) -> LLMConfig:
        base_url = self.base_url or os.environ.get("KERNELMILL_LLM_BASE_URL")
        model = self.model or os.environ.get("KERNELMILL_LLM_MODEL")
        api_key = self.api_key or os.environ.get("OPENAI_API_KEY")
        if not model:
            raise KernelmillError("LLM proposals need a model: pass --llm-model or set "
                                  "KERNELMILL_LLM_MODEL")
        if not base_url and not api_key:
            raise KernelmillError("LLM proposals need an endpoint: pass --llm-base-url or set "
                                  "KERNELMILL_LLM_BASE_URL (or OPENAI_API_KEY for api.openai.com)")
        return LLMConfig(base_url=base_url, model=model, api_key=api_key or "unused",
                         temperature=self.temperature, max_tokens=self.max_tokens,
                         timeout_s=self.timeout_s, n_examples=self.n_examples,
                         fraction=self.fraction, extra=dict(self.extra))


def _code_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of each fenced block, fences matched line by line."""
    blocks, lang, lines = [], None, []
    for line in text.splitlines():
        stripped = line.strip()
        if lang is None and stripped.startswith("```"):
            lang, lines = stripped[3:].strip().lower(), []
        elif lang is not None and stripped.startswith("```"):
            blocks.append((lang, "\n".join(lines)))
            lang = None
        elif lang is not None:
            lines.append(line)
    return blocks


def extract_code(text: str) -> str:
    """The Python code in an answer: the code block that defines ``Model``, else the last code
    block, else the whole text when it parses. Raises ``ValueError`` when there is none."""
    blocks = [body for lang, body in _code_blocks(text or "") if lang in ("", "python", "py")]
    for block in blocks:
        if "class Model" in block:
            return block.strip() + "\n"
    if blocks:
        return blocks[-1].strip() + "\n"
    stripped = (text or "").strip()
    if stripped:
        try:
            parse(stripped)  # the process's locked parse (synthesis runs in threads)
            return stripped + "\n"
        except SyntaxError:
            pass
    raise ValueError("the answer holds no Python code block")


class LLMProposer:
    """Few-shot prompts an OpenAI-compatible chat endpoint for new problems."""

    def __init__(self, config: LLMConfig | None = None):
        try:
            import openai
        except ImportError:  # pragma: no cover — openai is a dependency
            raise KernelmillError("LLM proposals need the openai package: pip install openai") \
                from None
        self.config = (config or LLMConfig()).resolved()
        self.client = openai.OpenAI(base_url=self.config.base_url, api_key=self.config.api_key,
                                    timeout=self.config.timeout_s, max_retries=1)

    def messages(self, category: str, examples: list[str]) -> list[dict[str, str]]:
        shots = "\n\n".join(f"Example {i + 1}:\n```python\n{src.strip()}\n```"
                            for i, src in enumerate(examples))
        user = (f"{shots}\n\nWrite one new problem of category `{category}` that differs from the "
                f"examples in the operations it combines (not only in sizes). Keep it realistic: "
                f"something a model or training step really computes.")
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]

    def ask(self, category: str, examples: list[str]) -> str:
        """The raw text of the answer; raises ``KernelmillError`` when the endpoint fails."""
        import openai
        try:
            response = self.client.chat.completions.create(
                model=self.config.model, messages=self.messages(category, examples),
                temperature=self.config.temperature, max_tokens=self.config.max_tokens,
                **self.config.extra)
        except openai.OpenAIError as exc:
            raise KernelmillError(f"LLM endpoint {self.config.base_url or 'api.openai.com'}: "
                                  f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}") from None
        if not response.choices:
            raise KernelmillError("LLM endpoint answered with no choices")
        return response.choices[0].message.content or ""

    def propose(self, category: str, examples: list[str]) -> str:
        """One proposed source (not yet checked); ``ValueError`` if the answer holds no code."""
        return extract_code(self.ask(category, examples))
