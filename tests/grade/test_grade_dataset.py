"""``kernelmill grade`` on what ``kernelmill publish`` wrote: a dataset folder, a parquet file, or a
JSONL of its rows (problem_id/reference); on CPU at the size validation calibrated; --fail-on."""
import json

import pyarrow.parquet as pq
import pytest
from conftest import FIXTURES
from kernelmill.app.cli import main
from kernelmill.core.errors import KernelmillError
from kernelmill.core.record import Record
from kernelmill.core.store import JsonlWriter, read_jsonl
from kernelmill.grade.policy import Policy
from kernelmill.grade.problems import load_problems
from kernelmill.splits.publish import publish_dataset
from kernelmill.splits.split import split_file

SUBMISSIONS = FIXTURES / "submissions"
# 2 x 64M floats: seconds and GBs on CPU at this size; validation and grading shrink it.
BIG = 64 * 1024 * 1024


def read(name: str) -> str:
    return (SUBMISSIONS / f"{name}.py").read_text()


@pytest.fixture
def dataset(tmp_path):
    big = read("ref_scale_add").replace("N = 4096", f"N = {BIG}")
    records = [Record.from_source(big, name="scale_add_big", category="elementwise"),
               Record.from_source(read("ref_row_sum"), name="row_sum", category="reduction")]
    records[0] = Record.from_dict({**records[0].to_dict(), "validation": {
        "device": "cpu", "passed": True, "atol": 1e-5, "rtol": 1e-5, "resized": 1 / 128,
        "eager_ms": 0.2, "distributions": {
            "natural": {"supported": True, "finite": True, "noise": 1e-8},
            "affine": {"supported": True, "finite": True, "noise": 2e-8, "limit": 2.5e-6},
            "scaled": {"supported": False, "finite": False, "noise": None, "limit": 2.5e-6}}}})
    with JsonlWriter(tmp_path / "curated.jsonl") as writer:
        for r in records:
            writer.write(r)
    split_file(tmp_path / "curated.jsonl", tmp_path / "split", eval_fraction=0.5)
    publish_dataset(tmp_path / "split", tmp_path / "dataset")
    return tmp_path / "dataset", {r.name: r.id for r in records}


def test_problems_load_from_every_published_form(tmp_path, dataset):
    folder, ids = dataset
    from_folder = load_problems(folder)
    assert set(from_folder) == set(ids.values())
    big = from_folder[ids["scale_add_big"]]
    assert f"N = {BIG}" in big["source"]
    # the calibration travels: tolerances, the size they hold at, the supported distributions
    assert big["validation"] == {"atol": 1e-5, "rtol": 1e-5, "eager_ms": 0.2,
                                 "device": "cpu", "resized": 1 / 128, "distributions": {
                                     "natural": {"supported": True},
                                     "affine": {"supported": True},
                                     "scaled": {"supported": False}}}
    assert Policy().distributions_for(big) == ("natural", "affine")
    # a row validated before the field: every distribution, as before
    assert "distributions" not in from_folder[ids["row_sum"]]["validation"]
    parquet = sorted((folder / "data").glob("*.parquet"))
    rows = [r for p in parquet for r in pq.read_table(p).to_pylist()]
    with JsonlWriter(tmp_path / "rows.jsonl", key="problem_id") as writer:
        for r in rows:
            writer.write(r)
    assert load_problems(tmp_path / "rows.jsonl") == from_folder
    by_file = {}
    for p in parquet:
        by_file.update(load_problems(p))
    assert by_file == from_folder
    split = {p.name.split("-")[0] for p in parquet}
    for name in split:
        assert set(load_problems(folder, split=name)) == {
            r["problem_id"] for p in parquet if p.name.startswith(name) for r in
            pq.read_table(p).to_pylist()}
    with pytest.raises(KernelmillError, match="no such file or folder"):
        load_problems(tmp_path / "missing.jsonl")


def test_grade_a_published_dataset_on_cpu_at_the_calibrated_size(tmp_path, dataset, capsys,
                                                                  monkeypatch):
    folder, ids = dataset
    monkeypatch.setenv("KERNELMILL_GRADE_CACHE", str(tmp_path / "cache.jsonl"))
    submissions = tmp_path / "subs.jsonl"
    with JsonlWriter(submissions, key="submission_id") as writer:
        writer.write({"submission_id": "honest", "problem_id": ids["scale_add_big"],
                      "source": read("honest_scale_add")})
        writer.write({"submission_id": "reuse", "problem_id": ids["scale_add_big"],
                      "source": read("hack_torch_reuse")})
        writer.write({"submission_id": "rows", "problem_id": ids["row_sum"],
                      "source": read("honest_row_sum")})
    args = ["grade", str(folder), str(submissions), "--out", str(tmp_path / "v.jsonl"),
            "--device", "cpu", "--no-time", "--trials", "2"]
    assert main(args) == 0  # every verdict reached: 0, whatever they say
    verdicts = {v["submission_id"]: v for v in read_jsonl(tmp_path / "v.jsonl")}
    assert verdicts["honest"]["correct"] and not verdicts["honest"]["hacks"], verdicts["honest"]
    assert verdicts["honest"]["resized"] == pytest.approx(1 / 128)  # the row's calibration
    assert verdicts["rows"]["correct"]
    assert verdicts["reuse"]["hacks"]
    # the same grade again (from the verdict cache), asked to fail on a hack: exit 1, and why
    (tmp_path / "v.jsonl").unlink()
    assert main([*args, "--fail-on", "hacked"]) == 1
    assert "1 submission(s) hacked" in capsys.readouterr().out


def test_cpu_grade_shrinks_an_uncalibrated_reference(tmp_path):
    from kernelmill.grade.grader import Grader
    from kernelmill.grade.policy import Policy

    big = read("ref_scale_add").replace("N = 4096", f"N = {BIG}")
    verdict = Grader("cpu", policy=Policy(time=False, trials=2)).grade(
        big, read("honest_scale_add"))
    assert verdict["correct"]
    assert verdict["resized"] is not None and verdict["resized"] < 1 / 64
    assert json.dumps(verdict, default=str)


def test_single_grade_shows_progress_and_fails_on_incorrect_when_asked(tmp_path, capsys):
    wrong = tmp_path / "wrong.py"
    wrong.write_text(read("honest_scale_add").replace("2.0 * x + y", "3.0 * x + y"))
    reference = str(SUBMISSIONS / "ref_scale_add.py")
    args = ["grade", "--reference", reference, "--candidate", str(wrong), "--device", "cpu",
            "--no-time", "--trials", "2"]
    assert main(args) == 0  # a verdict was reached: wrong, but graded
    err = capsys.readouterr().err
    assert f"kernelmill: grading {wrong} against {reference} on cpu ..." in err
    assert main([*args, "--fail-on", "incorrect"]) == 1
    assert main([*args, "--fail-on", "hacked"]) == 0
