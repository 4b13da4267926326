"""The shipped seed corpus: well-formed, spread over every category, and real work on CPU.

Each seed is shrunk with ``shrink_for_cpu`` and run in-process (the seeds are trusted sources):
deterministic under fixed seeds, finite, far from zero, and changing when the inputs or the
weights are drawn again.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from kernelmill.curate.problem import CATEGORIES, check_source
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


def _run(namespace: dict, init_seed: int, input_seed: int) -> tuple[torch.Tensor, bool, int]:
    torch.manual_seed(init_seed)
    model = namespace["Model"](*namespace["get_init_inputs"]())
    torch.manual_seed(input_seed)
    inputs = namespace["get_inputs"]()
    with torch.no_grad():
        out = model(*inputs)
    largest = max(t.numel() for t in inputs if isinstance(t, torch.Tensor))
    return _flat_output(out), any(True for _ in model.parameters()), largest


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
    assert largest_numel(shrunk.source) == shrunk.numel_after

    namespace: dict = {"__name__": f"seed_{path.stem}"}
    exec(compile(shrunk.source, str(path), "exec"), namespace)

    out, has_weights, largest_input = _run(namespace, init_seed=0, input_seed=0)
    assert largest_input <= shrunk.numel_after, "static size estimate missed an input"
    again, _, _ = _run(namespace, init_seed=0, input_seed=0)
    assert torch.equal(out, again), "not deterministic under fixed seeds"
    assert torch.isfinite(out).all(), "non-finite output"
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
