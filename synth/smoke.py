"""CPU smoke run of synthesized problems, shrunk to CPU size: do they execute, deterministically,
with outputs that depend on the inputs?

Not the validator (validate/ measures on the GPU, in isolated workers): a quick in-process check
for tests and the synth benchmark that the generator's output is runnable. Sources are our own
compositions and mutations; they are executed in this process.
"""
from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import torch

from .resize import CPU_MAX_NUMEL, ResizeError, shrink_for_cpu


@dataclass
class SmokeResult:
    ok: bool
    reason: str = ""
    seconds: float = 0.0


@dataclass
class SmokeReport:
    n: int = 0
    passed: int = 0
    failures: Counter = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def pass_rate(self) -> float:
        return self.passed / self.n if self.n else 0.0


def _flat(out: Any) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for item in out for t in _flat(item)]
    return []


def _run(namespace: dict, model_seed: int, input_seed: int) -> list[torch.Tensor]:
    torch.manual_seed(model_seed)
    model = namespace["Model"](*namespace["get_init_inputs"]())
    torch.manual_seed(input_seed)
    inputs = namespace["get_inputs"]()
    with torch.no_grad():
        return [t.detach().float().clone() for t in _flat(model(*inputs))]


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(x.shape == y.shape and torch.equal(x, y) for x, y in zip(a, b))


def smoke_check(source: str, *, max_numel: int = CPU_MAX_NUMEL) -> SmokeResult:
    """Shrink, run twice with the same seeds and once with other inputs; say what failed."""
    start = time.monotonic()

    def result(ok: bool, reason: str = "") -> SmokeResult:
        return SmokeResult(ok, reason, time.monotonic() - start)

    try:
        small = shrink_for_cpu(source, max_numel=max_numel)
        small = getattr(small, "source", small)
    except ResizeError:
        small = source  # already small, or nothing to resize
    namespace: dict[str, Any] = {"__name__": "kernelmill_smoke"}
    try:
        exec(compile(small, "<smoke>", "exec"), namespace)  # noqa: S102 — our own sources
        first = _run(namespace, 0, 1)
        again = _run(namespace, 0, 1)
        other = _run(namespace, 0, 2)
    except Exception as exc:  # noqa: BLE001
        return result(False, f"error: {type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}")
    if not first:
        return result(False, "no tensor output")
    if not all(torch.isfinite(t).all() for t in first):
        return result(False, "non-finite output")
    if not _same(first, again):
        return result(False, "nondeterministic")
    if _same(first, other):
        return result(False, "input-independent")
    if all(t.numel() > 1 and float(t.std()) == 0.0 for t in first):
        return result(False, "constant output")
    return result(True)


def smoke_run(sources: list[str], *, sample: int | None = None, seed: int = 0,
              max_numel: int = CPU_MAX_NUMEL) -> SmokeReport:
    """Smoke-check ``sample`` random sources (all when None)."""
    start = time.monotonic()
    chosen = list(sources)
    if sample is not None and sample < len(chosen):
        chosen = random.Random(seed).sample(chosen, sample)
    report = SmokeReport()
    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    for source in chosen:
        res = smoke_check(source, max_numel=max_numel)
        report.n += 1
        if res.ok:
            report.passed += 1
        else:
            label = res.reason.split(":")[0] if res.reason.startswith("error") else res.reason
            report.failures[label] += 1
            report.examples.setdefault(res.reason[:80], source)
    report.seconds = time.monotonic() - start
    return report
