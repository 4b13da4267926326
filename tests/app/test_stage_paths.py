"""The stage-by-stage CLI and ``kernelmill build`` publish the same rows for the same inputs.

Validation only enriches; the filter step drops the failed problems, in the build (its ``filter``
stage) and on the stage-by-stage path (``kernelmill dedup`` applies it first). The input set holds
a defective problem (a constant output), which both paths must leave out.
"""
from __future__ import annotations

import shutil

import pytest
from conftest import FIXTURES, ROOT, run_cli

from kernelmill.core.store import read_jsonl

pytestmark = pytest.mark.slow

DEFECTIVE = FIXTURES / "problems_defective" / "constant_softmax.py"


@pytest.fixture(scope="module")
def problem_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("paths") / "problems"
    folder.mkdir()
    seeds = sorted((ROOT / "data" / "seeds").glob("*.py"))[:3]
    for path in [*seeds, DEFECTIVE]:
        shutil.copy2(path, folder / path.name)
    return folder


def _dataset_ids(folder) -> dict[str, set[str]]:
    import datasets

    loaded = datasets.load_dataset(str(folder))
    return {split: set(rows["problem_id"] if "problem_id" in rows.column_names else rows["id"])
            for split, rows in loaded.items()}


def _ok(done) -> None:
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]


def test_stage_by_stage_and_build_publish_the_same_rows(problem_folder, tmp_path):
    build = tmp_path / "build"
    _ok(run_cli("build", "--out", str(build), "--seeds-dir", str(problem_folder), "--n", "0",
                "--device", "cpu", "--workers", "2", "--no-report"))
    steps = tmp_path / "steps"
    steps.mkdir()
    _ok(run_cli("import", str(problem_folder), "--out", str(steps / "problems.jsonl"),
                "--generator", "seed"))
    _ok(run_cli("validate", str(steps / "problems.jsonl"), "--out",
                str(steps / "validated.jsonl"), "--device", "cpu", "--workers", "2"))
    dedup = run_cli("dedup", str(steps / "validated.jsonl"), "--out", str(steps / "deduped.jsonl"))
    _ok(dedup)
    _ok(run_cli("cluster", str(steps / "deduped.jsonl"), "--out", str(steps / "curated.jsonl")))
    _ok(run_cli("split", str(steps / "curated.jsonl"), "--out", str(steps / "splits")))
    _ok(run_cli("publish", str(steps / "splits"), "--out", str(steps / "dataset")))

    validated = {row["name"]: row for row in read_jsonl(steps / "validated.jsonl")}
    failed = {name for name, row in validated.items() if not row["validation"]["passed"]}
    assert failed, "the defective problem must fail validation"
    assert "dropped failed" in dedup.stdout  # the filter ran, and said so
    published = _dataset_ids(steps / "dataset")
    assert published == _dataset_ids(build / "dataset")
    all_published = set().union(*published.values())
    failed_ids = {validated[name]["id"] for name in failed}
    assert not all_published & failed_ids
    assert all_published  # the healthy problems made it through


def test_keep_failed_keeps_them_and_counts(problem_folder, tmp_path):
    problems, validated = tmp_path / "problems.jsonl", tmp_path / "validated.jsonl"
    _ok(run_cli("import", str(problem_folder / DEFECTIVE.name), "--out", str(problems)))
    _ok(run_cli("validate", str(problems), "--out", str(validated), "--device", "cpu",
                "--workers", "1"))
    kept = run_cli("filter", str(validated), "--out", str(tmp_path / "kept.jsonl"),
                   "--keep-failed")
    _ok(kept)
    assert "1 failed, kept" in kept.stdout
    assert len(list(read_jsonl(tmp_path / "kept.jsonl"))) == 1
    dropped = run_cli("filter", str(validated), "--out", str(tmp_path / "none.jsonl"))
    _ok(dropped)
    assert list(read_jsonl(tmp_path / "none.jsonl")) == []
