"""The shipped seed corpus: well-formed, spread over every category, and real work on CPU.

Each seed is shrunk with ``shrink_for_cpu`` and run in-process (the seeds are trusted sources):
deterministic under fixed seeds, not stochastic, finite, far from zero, and changing when the
inputs or the weights are drawn again. Defective sources show that the check can fail.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from kernelmill.core.problem import CATEGORIES, check_source
from kernelmill.data import SEEDS_DIR
from kernelmill.synth.resize import CPU_MAX_NUMEL, largest_numel, shrink_for_cpu

# half the default CPU size keeps the whole corpus within the CI time budget
TEST_MAX_NUMEL = CPU_MAX_NUMEL // 2

SEED_PATHS = sorted(Path(SEEDS_DIR).glob("*.py"))
SEED_IDS = [p.stem for p in SEED_PATHS]


def _flat_output(out) -> torch.Tensor:
    if isinstance(out, torch.Tensor):
        return out.detach().double().flatten()
    assert isinstance(out, (tuple, list)) and out, f"forward returned {type(out).__name__}"
    return torch.cat([_flat_output(o) for o in out])


def _run(namespace: dict, init_seed: int, input_seed: int, *, twice: bool = False):
    """(flat output, has parameters, largest input numel); ``twice`` also returns a second
    forward of the same model on the same inputs, with the random generator moved on."""
    torch.manual_seed(init_seed)
    model = namespace["Model"](*namespace["get_init_inputs"]())
    torch.manual_seed(input_seed)
    inputs = namespace["get_inputs"]()
    with torch.no_grad():
        out = _flat_output(model(*inputs))
        if twice:
            torch.rand(1)
            second = _flat_output(model(*inputs))
    largest = max(t.numel() for t in inputs if isinstance(t, torch.Tensor))
    has_weights = any(True for _ in model.parameters())
    return (out, has_weights, largest, second) if twice else (out, has_weights, largest)


def _relative_change(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / (a.norm() + 1e-30))


def test_corpus_size_and_categories():
    assert len(SEED_PATHS) >= 60
    problems = [check_source(p.read_text(), str(p)) for p in SEED_PATHS]
    covered = {p.category for p in problems}
    assert covered == set(CATEGORIES), f"missing: {set(CATEGORIES) - covered}"
    levels = {p.level for p in problems}
    assert levels == {1, 2, 3}
    for problem in problems:
        assert problem.description and not problem.description.lower().startswith("category")
    # names are descriptive snake_case and unique
    assert all(p.stem.islower() and " " not in p.stem for p in SEED_PATHS)


def check_real_work(source: str, path: str) -> None:
    """Run a (shrunk) problem in-process and assert it is real work; AssertionError says why."""
    namespace: dict = {"__name__": "problem_under_test"}
    exec(compile(source, path, "exec"), namespace)

    out, has_weights, largest_input, second = _run(namespace, 0, 0, twice=True)
    assert largest_input <= (largest_numel(source) or 0), "static size estimate missed an input"
    assert torch.isfinite(out).all(), "non-finite output"
    assert torch.equal(out, second), "forward is stochastic (or keeps state between calls)"
    again, _, _ = _run(namespace, init_seed=0, input_seed=0)
    assert torch.equal(out, again), "not deterministic under fixed seeds"
    rms = float(out.pow(2).mean().sqrt())
    assert rms > 1e-3, f"near-zero output (rms {rms:.2e})"

    other_inputs, _, _ = _run(namespace, init_seed=0, input_seed=1)
    change = _relative_change(out, other_inputs)
    assert change > 1e-3, f"output barely depends on the inputs (relative change {change:.1e})"
    changed = float((out != other_inputs).double().mean())
    assert changed > 0.25, f"only {changed:.0%} of the output depends on the inputs"

    if has_weights:
        other_weights, _, _ = _run(namespace, init_seed=1, input_seed=0)
        change = _relative_change(out, other_weights)
        assert change > 1e-3, f"output barely depends on the weights (relative change {change:.1e})"


@pytest.mark.parametrize("path", SEED_PATHS, ids=SEED_IDS)
def test_seed_is_real_work_on_cpu(path: Path):
    source = path.read_text()
    problem = check_source(source, str(path))
    assert problem.category in CATEGORIES and problem.level in (1, 2, 3)

    default = shrink_for_cpu(source)
    assert default.numel_after is not None and default.numel_after <= CPU_MAX_NUMEL
    shrunk = shrink_for_cpu(source, TEST_MAX_NUMEL)
    assert shrunk.numel_after is not None and shrunk.numel_after <= TEST_MAX_NUMEL
    check_source(shrunk.source, str(path))
    check_real_work(shrunk.source, str(path))


_DEFECTIVE_TEMPLATE = '''import torch
import torch.nn as nn
import torch.nn.functional as F
ROWS = 64
COLS = 128
class Model(nn.Module):
    def __init__(self, cols):
        super().__init__()
        self.fc = nn.Linear(cols, cols)
    def forward(self, x):
        return {body}
def get_inputs():
    return [torch.randn(ROWS, COLS)]
def get_init_inputs():
    return [COLS]
'''


@pytest.mark.parametrize("body, reason", [
    ("F.dropout(self.fc(x), 0.5, training=True)", "stochastic"),
    ("self.fc(torch.zeros_like(x))", "barely depends on the inputs"),
    ("torch.relu(self.fc(x)) * 1e-6", "near-zero"),
    ("x * 2.0 + self.fc.weight.sum() * 0", "barely depends on the weights"),
    ("torch.cat([self.fc(x), torch.ones(x.shape[0], 512)], dim=1)", "of the output depends"),
    ("torch.log(self.fc(x))", "non-finite"),
])
def test_the_real_work_check_catches_defects(body, reason):
    with pytest.raises(AssertionError, match=reason):
        check_real_work(_DEFECTIVE_TEMPLATE.format(body=body), "<defective>")
