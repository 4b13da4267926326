"""Fingerprints say whether an output is still what its stage wrote, and why not."""
from __future__ import annotations

import json

from kernelmill.core.fingerprint import fingerprint, fingerprints, why_changed


def _write_rows(path, n):
    path.write_text("".join(json.dumps({"id": f"p{i}", "source": "x"}) + "\n" for i in range(n)))


def test_a_cut_line_is_a_changed_row_count(tmp_path):
    out = tmp_path / "deduped.jsonl"
    _write_rows(out, 12)
    recorded = fingerprints({"deduped.jsonl": out})
    assert recorded["deduped.jsonl"]["rows"] == 12
    assert why_changed(recorded, fingerprints({"deduped.jsonl": out})) is None
    lines = out.read_text().splitlines(keepends=True)
    out.write_text("".join(lines[:5] + lines[6:]))
    assert why_changed(recorded, fingerprints({"deduped.jsonl": out})) == (
        "deduped.jsonl changed since the stage finished (11 rows, 12 when it finished)")


def test_same_rows_other_content_and_missing_outputs(tmp_path):
    out = tmp_path / "curated.jsonl"
    _write_rows(out, 3)
    recorded = fingerprints({"curated.jsonl": out})
    out.write_text(out.read_text().replace('"p1"', '"p9"'))
    assert why_changed(recorded, fingerprints({"curated.jsonl": out})) == (
        "curated.jsonl changed since the stage finished (same row count, other content)")
    out.unlink()
    assert why_changed(recorded, fingerprints({"curated.jsonl": out})) == "curated.jsonl is missing"
    assert "older build" in why_changed(None, fingerprints({"curated.jsonl": out}))


def test_folders_count_rows_of_their_jsonl_files_and_see_renames(tmp_path):
    splits = tmp_path / "splits"
    splits.mkdir()
    _write_rows(splits / "train.jsonl", 8)
    _write_rows(splits / "eval.jsonl", 2)
    (splits / "contamination.json").write_text("{}")
    before = fingerprint(splits)
    assert before["rows"] == 10 and before["files"] == 3
    (splits / "eval.jsonl").rename(splits / "eval2.jsonl")  # same bytes, other name
    after = fingerprint(splits)
    assert after["rows"] == 10 and after["sha256"] != before["sha256"]
    (splits / "train.jsonl").write_text((splits / "train.jsonl").read_text()[:-1])  # no last \n
    assert fingerprint(splits)["rows"] == 10  # an unterminated last line is still a row
