"""The synth stage end to end: CLI, provenance, determinism, resume, and a CPU smoke run."""
from __future__ import annotations

import json

import pytest
from kernelmill.app.cli import main
from kernelmill.core.problem import check_source
from kernelmill.core.store import read_records
from kernelmill.data import SEEDS_DIR
from kernelmill.synth.generate import load_seeds, retag, synthesize
from kernelmill.synth.smoke import smoke_run


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    out = tmp_path_factory.mktemp("synth") / "problems.jsonl"
    assert main(["synth", "--n", "40", "--seed", "3", "--out", str(out)]) == 0
    return list(read_records(out))


def test_cli_writes_n_checked_problems_with_provenance(generated):
    seeds = {r.id: r for r in load_seeds(SEEDS_DIR)}
    assert len(generated) == 40 and len({r.id for r in generated}) == 40
    generators = {r.provenance["generator"] for r in generated}
    assert generators == {"composer", "mutator"}
    by_id = {r.id: r for r in generated}
    for record in generated:
        check_source(record.source, name=record.name)
        prov = record.provenance
        assert set(prov) >= {"seed", "operations", "generator", "parent"} and prov["operations"]
        if prov["generator"] == "composer":
            assert prov["seed"].startswith("composed-") and prov["parent"] is None
            assert prov["operations"][0]["op"] == "compose"
        else:
            parent = seeds.get(prov["parent"]) or by_id.get(prov["parent"])
            assert parent is not None, "a mutant's parent is a seed or an earlier problem"
            assert prov["seed"] == parent.family
            assert prov["operations"][-1]["op"] in {
                "resize", "dtype", "swap_op", "insert_epilogue", "remove_epilogue",
                "reduction_dim", "conv_pool_params", "input_distribution"}


def test_cpu_smoke_run_of_20_random_problems(generated):
    report = smoke_run([r.source for r in generated], sample=20, seed=0, max_numel=16384)
    assert report.n == 20
    assert report.pass_rate >= 0.9, (report.failures, list(report.examples))


def test_deterministic_and_resumable(tmp_path):
    full = tmp_path / "full.jsonl"
    stats = synthesize(SEEDS_DIR, full, n=10, seed=11)
    assert stats.n_kept == 10
    part = tmp_path / "part.jsonl"
    synthesize(SEEDS_DIR, part, n=4, seed=11)
    resumed = synthesize(SEEDS_DIR, part, n=10, seed=11)
    assert resumed.counts["resumed"] == 4 and resumed.n_kept == 6
    lines = lambda p: [json.loads(l)["id"] for l in p.read_text().splitlines()]
    assert lines(full) == lines(part)
    other = synthesize(SEEDS_DIR, tmp_path / "other.jsonl", n=4, seed=12)
    assert other.n_kept == 4 and set(lines(tmp_path / "other.jsonl")) - set(lines(full))


def test_retag_rewrites_docstring_metadata_only():
    source = '"""Thing.\n\ncategory: activation\nlevel: 1\n"""\nX = 1  # level: 1\n'
    assert retag(source, category="fused", level=2) == (
        '"""Thing.\n\ncategory: fused\nlevel: 2\n"""\nX = 1  # level: 1\n')


def test_missing_seeds_folder_is_a_one_line_error(tmp_path, capsys):
    assert main(["synth", "--n", "1", "--seeds", str(tmp_path / "nope"),
                 "--out", str(tmp_path / "o.jsonl")]) == 2
    assert "no such seeds folder" in capsys.readouterr().err
