"""`kernelmill export` reads problems in every form `kernelmill grade` takes, and `kernelmill
show` writes one published row's reference as a problem.py (issue 49, item 7); an unknown
`--split` lists the splits there are (item 8)."""
from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from kernelmill.app.cli import main
from kernelmill.core.interop import problem_files, record_from_file
from kernelmill.core.record import Record
from kernelmill.core.store import JsonlWriter
from kernelmill.data import SEEDS_DIR
from kernelmill.splits.publish import publish_dataset


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    seeds_dir = SEEDS_DIR
    root = tmp_path_factory.mktemp("published")
    records = [Record.from_dict({**record_from_file(p).to_dict(), "cluster": i % 3,
                                 "validation": {"device": "cpu", "passed": True, "atol": 1e-4,
                                                "rtol": 1e-4, "checks": {}}})
               for i, p in enumerate(problem_files(seeds_dir)[:9])]
    with JsonlWriter(root / "curated.jsonl") as writer:
        for record in records:
            writer.write(record)
    assert main(["split", str(root / "curated.jsonl"), "--out", str(root / "splits"),
                 "--against", str(seeds_dir), "--keep-contaminated",
                 "--eval-fraction", "0.3"]) == 0
    publish_dataset(root / "splits", root / "dataset")
    rows = [{**row, "split": path.name.split("-")[0]}
            for path in sorted((root / "dataset" / "data").glob("*.parquet"))
            for row in pq.read_table(path).to_pylist()]
    assert rows
    return root, rows


def exported_sources(folder) -> set[str]:
    return {p.read_text(encoding="utf-8") for p in folder.rglob("*.py")}


def references(rows, split=None) -> set[str]:
    return {r["reference"] if r["reference"].endswith("\n") else r["reference"] + "\n"
            for r in rows if split is None or r["split"] == split}


def test_export_takes_a_dataset_folder_a_parquet_file_and_published_rows(dataset, tmp_path):
    root, rows = dataset
    assert main(["export", str(root / "dataset"), "--out", str(tmp_path / "a")]) == 0
    assert exported_sources(tmp_path / "a") == references(rows)
    parquet = next((root / "dataset" / "data").glob("eval-*.parquet"))
    assert main(["export", str(parquet), "--out", str(tmp_path / "b")]) == 0
    assert exported_sources(tmp_path / "b") == references(rows, "eval")
    assert main(["export", str(root / "dataset"), "--split", "train",
                 "--out", str(tmp_path / "c")]) == 0
    assert exported_sources(tmp_path / "c") == references(rows, "train")
    published = tmp_path / "rows.jsonl"
    published.write_text("".join(json.dumps({k: r[k] for k in ("problem_id", "reference",
                                                               "name", "level")}) + "\n"
                                 for r in rows))
    assert main(["export", str(published), "--out", str(tmp_path / "d")]) == 0
    assert exported_sources(tmp_path / "d") == references(rows)
    # records, as before
    assert main(["export", str(root / "splits" / "train.jsonl"), "--out",
                 str(tmp_path / "e")]) == 0
    assert exported_sources(tmp_path / "e") == references(rows, "train")


def test_export_takes_a_hub_id(dataset, tmp_path, monkeypatch):
    import datasets

    _, rows = dataset
    asked = []

    def load_dataset(name, *args, **kwargs):
        asked.append(name)
        return {"train": [r for r in rows if r["split"] == "train"],
                "eval": [r for r in rows if r["split"] == "eval"]}

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    assert main(["export", "some-org/kernels", "--split", "eval",
                 "--out", str(tmp_path / "kb")]) == 0
    assert asked == ["some-org/kernels"]
    assert exported_sources(tmp_path / "kb") == references(rows, "eval")


def test_show_writes_one_rows_reference_as_problem_py(dataset, tmp_path, capsys):
    root, rows = dataset
    row = rows[-1]
    out = tmp_path / "problem.py"
    assert main(["show", str(root / "dataset"), row["problem_id"], "--out", str(out)]) == 0
    assert out.read_text(encoding="utf-8").strip() == row["reference"].strip()
    assert "kernelmill grade --reference" in capsys.readouterr().err
    assert main(["show", str(root / "dataset"), row["problem_id"][:12]]) == 0  # a prefix
    assert capsys.readouterr().out.strip() == row["reference"].strip()
    assert main(["show", str(root / "dataset"), "no-such-row"]) == 2
    assert "no problem 'no-such-row'" in capsys.readouterr().err


def test_an_unknown_split_lists_the_splits_there_are(dataset, tmp_path, capsys):
    root, _ = dataset
    assert main(["export", str(root / "dataset"), "--split", "evl",
                 "--out", str(tmp_path / "kb")]) == 2
    assert "no split 'evl' (splits: eval, train)" in capsys.readouterr().err
    assert main(["show", str(root / "dataset"), "x", "--split", "evl"]) == 2
    assert "(splits: eval, train)" in capsys.readouterr().err
    assert main(["export", str(root / "dataset"), "--format", "sft", "--split", "evl",
                 "--verdicts", str(tmp_path / "v.jsonl"), "--submissions",
                 str(tmp_path / "s.jsonl"), "--out", str(tmp_path / "sft.jsonl")]) == 2
    assert "no split 'evl' (splits: eval, train)" in capsys.readouterr().err
