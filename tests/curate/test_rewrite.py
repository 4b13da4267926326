"""Whole-file stages rerun with new options replace their --out, atomically: a rerun into an old
output writes exactly what a run into a fresh one writes, and a failed run leaves the old one."""
from __future__ import annotations

import pytest

from fixtures.dedup_sources import BASE, REFORMATTED, RESIZED, SWAPPED, UNRELATED
from kernelmill.core.errors import KernelmillError
from kernelmill.core.record import Record
from kernelmill.core.store import JsonlWriter, read_records
from kernelmill.curate.cluster import cluster_file
from kernelmill.curate.dedup import dedup_file


def _write(path, sources):
    with JsonlWriter(path, resume=False) as out:
        for i, source in enumerate(sources):
            out.write(Record.from_source(source, name=f"p{i}", category="fused"))
    return path


def test_dedup_rerun_with_other_input_and_options_keeps_no_stale_row(tmp_path):
    first = _write(tmp_path / "a.jsonl", [BASE, REFORMATTED, RESIZED, UNRELATED])
    second = _write(tmp_path / "b.jsonl", [BASE, SWAPPED])
    out = tmp_path / "deduped.jsonl"
    dedup_file(first, out, threshold=0.8)
    assert len(list(read_records(out))) == 3  # the reformatted copy is an exact duplicate
    dedup_file(second, out, threshold=0.5)
    fresh = tmp_path / "fresh.jsonl"
    dedup_file(second, fresh, threshold=0.5)
    assert out.read_bytes() == fresh.read_bytes()
    assert {r.id for r in read_records(out)} == {r.id for r in read_records(second)}
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_cluster_rerun_with_another_k_rewrites_every_cluster(tmp_path):
    sources = [BASE, RESIZED, SWAPPED, UNRELATED,
               UNRELATED.replace("M = 512", "M = 384"), UNRELATED.replace("M = 512", "M = 640")]
    deduped = tmp_path / "deduped.jsonl"
    dedup_file(_write(tmp_path / "in.jsonl", sources), deduped)
    out = tmp_path / "curated.jsonl"
    cluster_file(deduped, out, k=1)
    assert {r.cluster for r in read_records(out)} == {0}
    cluster_file(deduped, out, k=2)
    fresh = tmp_path / "fresh.jsonl"
    cluster_file(deduped, fresh, k=2)
    assert out.read_bytes() == fresh.read_bytes()
    assert {r.cluster for r in read_records(out)} == {0, 1}


def test_a_run_that_fails_half_way_leaves_the_previous_output(tmp_path, monkeypatch):
    records = _write(tmp_path / "in.jsonl", [BASE, RESIZED, UNRELATED])
    out = tmp_path / "deduped.jsonl"
    dedup_file(records, out)
    before = out.read_bytes()
    real_write = JsonlWriter.write

    def write_then_fail(self, obj):
        if self.written == 1:
            raise KeyboardInterrupt  # Ctrl-C (or kill) in the middle of writing the output
        return real_write(self, obj)

    monkeypatch.setattr(JsonlWriter, "write", write_then_fail)
    with pytest.raises(KeyboardInterrupt):
        dedup_file(records, out, threshold=0.5)
    assert out.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["deduped.jsonl", "in.jsonl"]


def test_dedup_and_cluster_refuse_input_with_no_record(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    verdicts = tmp_path / "verdicts.jsonl"
    verdicts.write_text('{"submission_id": "s1", "correct": true}\n')
    for stage in (dedup_file, cluster_file):
        with pytest.raises(KernelmillError, match=rf"^{empty}: no records \(the file is empty\)$"):
            stage(empty, tmp_path / "out.jsonl")
        with pytest.raises(KernelmillError, match=rf"^{verdicts}: none of its 1 row\(s\) is a "
                                                  "problem record"):
            stage(verdicts, tmp_path / "out.jsonl")
    assert not (tmp_path / "out.jsonl").exists()


def test_concat_and_split_failing_half_way_leave_their_previous_outputs(tmp_path, monkeypatch):
    from kernelmill.core.interop import CONCAT
    from kernelmill.splits.split import split_file

    records = _write(tmp_path / "in.jsonl", [BASE, RESIZED, SWAPPED, UNRELATED])
    more = _write(tmp_path / "more.jsonl", [UNRELATED.replace("M = 512", "M = 384")])
    concat = tmp_path / "problems.jsonl"
    CONCAT([records, more], concat)
    splits = tmp_path / "splits"
    split_file(records, splits, eval_fraction=0.5)
    before = {p: p.read_bytes() for p in (concat, splits / "train.jsonl", splits / "eval.jsonl")}
    real_write = JsonlWriter.write

    def write_then_fail(self, obj):
        if self.written == 1:
            raise OSError(5, "Input/output error")
        return real_write(self, obj)

    monkeypatch.setattr(JsonlWriter, "write", write_then_fail)
    with pytest.raises(OSError):
        CONCAT([more, records], concat)
    with pytest.raises(OSError):
        split_file(records, splits, eval_fraction=0.25, seed=3)
    assert {p: p.read_bytes() for p in before} == before
    assert [p.name for p in tmp_path.rglob("*.tmp")] == []
