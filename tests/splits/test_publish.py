"""Publish: the dataset folder round-trips through load_dataset offline; push is mocked."""
from __future__ import annotations

import json

import pytest
import yaml
from fixtures.dedup_sources import BASE
from kernelmill.app.cli import main
from kernelmill.core.errors import KernelmillError
from kernelmill.core.interop import problem_files, record_from_file
from kernelmill.core.record import Record
from kernelmill.core.store import JsonlWriter
from kernelmill.splits.publish import columns, publish_dataset


def validation(i: int) -> dict:
    return {"device": "NVIDIA H100 80GB HBM3", "torch": "2.11.0+cu130", "dtype": "float32",
            "passed": i % 5 != 0, "eager_ms": 0.5 + i, "inductor_ms": 0.4 + i,
            "inductor_speedup": (0.5 + i) / (0.4 + i), "atol": 1e-4, "rtol": 1e-3,
            "flops": 1e9 * (i + 1), "bytes": 1e6 * (i + 1),
            "difficulty": {"score": i / 30, "tier": ["easy", "medium", "hard"][i % 3]},
            "checks": {"deterministic": {"passed": True}, "not_constant": {"passed": i % 5 != 0},
                       "runtime_floor": {"passed": None}}}


@pytest.fixture
def split_dir(tmp_path, seeds_dir):
    records = [record_from_file(p) for p in problem_files(seeds_dir)[:30]]
    records = [Record.from_dict({**r.to_dict(), "validation": validation(i), "cluster": i % 4})
               for i, r in enumerate(records)]
    records.append(Record.from_source(BASE, name="marked", category="fused", level=2))
    raw = tmp_path / "curated.jsonl"
    with JsonlWriter(raw) as writer:
        for r in records:
            writer.write(r)
    bench = tmp_path / "bench" / "level2"
    bench.mkdir(parents=True)
    (bench / "1_Copy.py").write_text(BASE.replace("    def forward", "    # copied\n    def forward"))
    out = tmp_path / "split"
    assert main(["split", str(raw), "--out", str(out), "--eval-fraction", "0.25",
                 "--against", str(tmp_path / "bench"), "--keep-contaminated"]) == 0
    return out


def test_publish_round_trips_through_load_dataset(tmp_path, split_dir, capsys):
    import datasets

    dataset_dir = tmp_path / "dataset"
    assert main(["publish", str(split_dir), "--out", str(dataset_dir)]) == 0
    assert sorted(p.name for p in (dataset_dir / "data").iterdir()) == [
        "eval-00000-of-00001.parquet", "train-00000-of-00001.parquet"]
    ds = datasets.load_dataset(str(dataset_dir))
    assert set(ds) == {"train", "eval"}
    assert ds["train"].num_rows + ds["eval"].num_rows == 31
    declared = {name: feature for name, feature, _ in columns()}
    for split in ds.values():
        assert dict(split.features) == declared
    rows = {r["name"]: r for split in ds.values() for r in split}
    row = rows["softmax_rows"] if "softmax_rows" in rows else next(iter(rows.values()))
    assert row["reference"].startswith('"""') and "class Model" in row["reference"]
    assert row["problem_id"] and row["family"] and row["difficulty"] in ("easy", "medium", "hard")
    assert row["validation"]["device"] == "NVIDIA H100 80GB HBM3"
    checks = {c["name"]: c["passed"] for c in row["validation"]["checks"]}
    assert checks["deterministic"] is True and checks["runtime_floor"] is None
    assert rows["marked"]["contamination"]["matches"][0]["key"] == "exact"
    assert row["contamination"] is None
    # the builder's folders never reach the dataset: seeds are named inside the package
    origins = {r["provenance"]["origin"] for s in ds.values() for r in s} - {None}
    assert origins and all(not o.startswith("/") for o in origins)
    assert all(o.startswith("kernelmill/data/seeds/") for o in origins), origins
    # the prompt is a chat conversation quoting the reference, in Triton and CUDA variants
    assert [m["role"] for m in row["prompt"]] == ["system", "user"]
    assert row["reference"].strip() in row["prompt"][1]["content"]
    assert "Triton" in row["prompt"][0]["content"] and "load_inline" in row["prompt_cuda"][0][
        "content"]
    assert row["calibration_device"] == "cuda" and row["calibration_scale"] is None
    assert rows["marked"]["validated"] is None and rows["marked"]["difficulty"] == "unknown"
    families = {split: {r["family"] for r in ds[split]} for split in ds}
    assert not families["train"] & families["eval"]


def test_card_yaml_and_prose(tmp_path, split_dir):
    dataset_dir = tmp_path / "dataset"
    publish_dataset(split_dir, dataset_dir, pretty_name="kernelmill-test")
    text = (dataset_dir / "README.md").read_text()
    _, header, prose = text.split("---\n", 2)
    meta = yaml.safe_load(header)
    assert meta["license"] == "apache-2.0" and meta["task_categories"] == ["text-generation"]
    assert meta["size_categories"] == ["n<1K"]
    assert [f["split"] for f in meta["configs"][0]["data_files"]] == ["train", "eval"]
    assert [f["name"] for f in meta["dataset_info"]["features"]] == [c for c, _, _ in columns()]
    assert meta["pretty_name"] == "kernelmill-test"
    assert sum(s["num_examples"] for s in meta["dataset_info"]["splits"]) == 31
    for needle in ("NVIDIA H100 80GB HBM3", "2.11.0+cu130", "`not_constant`", "kernelmill grade",
                   "family", "31 problems were checked against", "1 matched and were kept and marked",
                   "| category |", "`reference`", "`prompt_cuda`", "--fail-on hacked",
                   "GRPOTrainer", "## Limitations"):
        assert needle in prose, needle
    assert "Not checked" not in prose
    assert (dataset_dir / "contamination.json").exists()


def test_push_to_hub_uses_hfapi(tmp_path, split_dir, monkeypatch):
    import huggingface_hub

    calls = []

    class FakeApi:
        def __init__(self, token=None):
            calls.append(("init", token))

        def create_repo(self, repo_id, **kwargs):
            calls.append(("create_repo", repo_id, kwargs))

        def upload_folder(self, **kwargs):
            calls.append(("upload_folder", kwargs))
            return "https://huggingface.co/datasets/org/kernels/commit/abc"

    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    dataset_dir = tmp_path / "dataset"
    stats = publish_dataset(split_dir, dataset_dir, push_to_hub="org/kernels", token="hf_x")
    assert stats.counts["pushed"] == 1
    assert calls[0] == ("init", "hf_x")
    assert calls[1] == ("create_repo", "org/kernels", {"repo_type": "dataset", "exist_ok": True})
    upload = calls[2][1]
    assert upload["repo_id"] == "org/kernels" and upload["repo_type"] == "dataset"
    assert upload["folder_path"] == str(dataset_dir)
    assert "pretty_name: org/kernels" in (dataset_dir / "README.md").read_text()


def test_publish_without_records_is_an_error(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(KernelmillError, match="kernelmill split"):
        publish_dataset(tmp_path / "empty", tmp_path / "ds")


def test_card_says_when_nothing_was_checked(tmp_path, split_dir):
    report = json.loads((split_dir / "contamination.json").read_text())
    report["benchmarks"], report["against"] = [], []
    (split_dir / "contamination.json").write_text(json.dumps(report))
    publish_dataset(split_dir, tmp_path / "dataset")
    text = (tmp_path / "dataset" / "README.md").read_text()
    assert "Not checked: no reference benchmark was given" in text
    assert "pretty_name: kernelmill GPU-kernel problems" in text  # not the folder's name


def test_the_card_lists_mined_sources_and_their_licenses(tmp_path, seeds_dir):
    from kernelmill.splits.publish import card_prose

    seed = record_from_file(problem_files(seeds_dir)[0])
    mined = Record.from_dict({**seed.to_dict(), "provenance": {
        "generator": "mine", "parent": None, "operations": [],
        "mined": {"package": "timm", "version": "1.0.31", "license": "Apache-2.0",
                  "qualname": "timm.layers.Mlp"}}})
    child = Record.from_source(BASE, name="mlp~epilogue", category="fused", level=2)
    child = Record.from_dict({**child.to_dict(), "provenance": {
        "generator": "mutator", "seed": mined.id, "parent": mined.id, "operations": []}})
    plain = Record.from_source(BASE.replace("def forward", "def  forward"), name="own",
                               category="fused", level=2)
    prose = card_prose({"train": [mined, child, plain]}, tmp_path, "kernelmill-test")
    assert "## Sources and licenses" in prose
    assert "| timm | 1.0.31 | Apache-2.0 | 2 |" in prose  # the mined module and its variation
    assert "under its source's license" in prose and "mined from the sources" in prose
    own = card_prose({"train": [plain]}, tmp_path, "kernelmill-test")
    assert "## Sources and licenses" not in own and own.rstrip().endswith("apache-2.0.")
