"""The op catalog and the composer: typed ops, checked compositions that run at small size."""
from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kernelmill.core.problem import CATEGORIES, check_source
from kernelmill.synth.catalog import GROUPS, default_catalog
from kernelmill.synth.checks import Rejected, vet_source
from kernelmill.synth.composer import Composer, CompositionError
from kernelmill.synth.emit import emit_source
from kernelmill.synth.smoke import smoke_check
from kernelmill.synth.trace import trace_source


def test_catalog_has_at_least_80_typed_ops_in_every_group():
    cat = default_catalog()
    assert len(cat) >= 80
    assert {op.group for op in cat.ops.values()} == set(GROUPS)
    for op in cat.ops.values():
        assert op.dtypes and set(op.dtypes) <= {"float32", "float16", "bfloat16"}, op.name
        for name, spec in op.params.items():
            assert spec["choices"], (op.name, name)
    mains = cat.with_role("main")
    assert {op.group for op in mains} >= {"linalg", "convolution", "attention", "reduction",
                                          "normalization", "pooling", "indexing"}
    assert len(cat.with_role("epilogue")) >= 40 and len(cat.with_role("loss")) >= 10


def test_catalog_names_resolve_every_spelling():
    cat = default_catalog()
    for qualname in ("torch.relu", "torch.nn.functional.relu", "torch.Tensor.relu", "torch.nn.ReLU"):
        assert cat.lookup(qualname).name == "relu"
    assert cat.for_trace("log_sigmoid").name == "logsigmoid"
    assert cat.for_trace("__rmul__").name == "mul"
    assert {op.name for op in cat.swap_group(cat["relu"])} >= {"gelu", "silu", "leaky_relu"}


def _compose(seed: int):
    composer = Composer()
    for attempt in range(20):
        try:
            comp = composer.draw(random.Random(f"{seed}:{attempt}"))
        except CompositionError:
            continue
        source, name = emit_source(comp, composer)
        try:
            vet_source(source, name=name)
        except Rejected:
            continue
        return comp, source, name
    raise AssertionError("20 draws in a row were rejected")


@settings(max_examples=6, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=10 ** 6))
def test_composed_problems_type_check_and_run_at_small_size(seed):
    comp, source, name = _compose(seed)
    problem = check_source(source, name=name)
    assert problem.category in CATEGORIES and problem.description
    assert 1 <= len(comp.steps) <= 5 or comp.loss is not None or comp.main.final
    trace = trace_source(source)
    assert [tuple(a.size for a in comp.out_shape)] == [v.shape for v in trace.outputs] \
        or comp.loss is not None
    result = smoke_check(source, max_numel=8192)
    assert result.ok, (result.reason, source)


def test_sizes_aim_at_real_gpu_work():
    composer = Composer()
    estimates = []
    for i in range(60):
        try:
            estimates.append(composer.draw(random.Random(i)).estimated_ms)
        except CompositionError:
            pass
    estimates.sort()
    median = estimates[len(estimates) // 2]
    assert 0.4 <= median <= 10.0
    assert sum(0.2 <= e <= 30 for e in estimates) >= 0.9 * len(estimates)


def test_emitted_source_is_clean_kernelbench():
    comp, source, name = _compose(7)
    lines = source.splitlines()
    assert lines[0].startswith('"""') and "category: " in source and "level: " in source
    constants = [l for l in lines if l and l.split(" = ")[0].isupper() and " = " in l]
    assert constants and all(l.split(" = ")[0] in source.split("def get_inputs")[1] or
                             l.startswith(("DTYPE", "GROUPS")) or
                             l.split(" = ")[0] in source.split("def get_init_inputs")[1]
                             for l in constants)
    assert "class Model(nn.Module):" in source and "def get_init_inputs():" in source


def test_composition_is_deterministic_and_families_follow_structure():
    composer = Composer()
    a = composer.draw(random.Random(5))
    b = composer.draw(random.Random(5))
    assert emit_source(a, composer) == emit_source(b, composer)
    assert a.family == b.family and a.family.startswith("composed-")
    b.dims = {k: v * 2 for k, v in b.dims.items()}
    assert a.family == b.family  # sizes do not make a new family
