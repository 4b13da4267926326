"""Bad input never flows on silently: bytes that are not UTF-8 stop the reader with file:line,
and an input with no usable row is one error, not an empty output."""
from __future__ import annotations

import json
import logging

import pytest

from kernelmill.core.errors import KernelmillError, ProblemError
from kernelmill.core.interop import export_kernelbench, import_folder
from kernelmill.core.problem import load_problem
from kernelmill.core.record import Record
from kernelmill.core.store import JsonlWriter, read_jsonl, read_records

GOOD = '''"""Tanh of a vector.

category: activation
level: 1
"""
import torch
import torch.nn as nn

N = 64


class Model(nn.Module):
    def forward(self, x):
        return torch.tanh(x)


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []
'''


def _records(n: int) -> list[Record]:
    return [Record.from_source(GOOD.replace("N = 64", f"N = {64 + i}"), name=f"tanh_é{i}")
            for i in range(n)]


def test_jsonl_with_invalid_utf8_is_an_error_naming_file_and_line(tmp_path):
    path = tmp_path / "problems.jsonl"
    with JsonlWriter(path) as out:
        for record in _records(3):
            out.write(record)
    lines = path.read_bytes().splitlines(keepends=True)
    lines[1] = lines[1].replace("é".encode(), b"\xe9")  # latin-1 byte inside a UTF-8 file
    path.write_bytes(b"".join(lines))
    with pytest.raises(KernelmillError, match=rf"^{path}:2: not UTF-8 \(byte 0xe9 at column \d+\)"):
        list(read_records(path))
    with pytest.raises(KernelmillError, match=rf"{path}:2: not UTF-8"):
        JsonlWriter(path)  # a writer resuming that file refuses too: it reads the keys first


def test_a_line_cut_inside_a_character_is_a_truncated_line_not_bad_bytes(tmp_path):
    path = tmp_path / "problems.jsonl"
    with JsonlWriter(path) as out:
        for record in _records(2):
            out.write(record)
    data = path.read_bytes()
    cut = data.rindex("é".encode()) + 1  # a writer killed half-way through a 2-byte character
    path.write_bytes(data[:cut])
    errors: list[str] = []
    got = list(read_records(path, on_error=errors.append))
    assert [r.name for r in got] == ["tanh_é0"]
    assert errors == [f"{path}:2: truncated last line skipped (ends inside a character)"]


def test_problem_file_with_invalid_utf8_names_file_line_and_column(tmp_path):
    path = tmp_path / "1_Tanh.py"
    path.write_bytes(GOOD.replace("Tanh of a vector", "Tanh of a v\xe9ctor").encode("latin-1"))
    with pytest.raises(ProblemError, match=rf"^{path}:1: cannot read file: not UTF-8 "
                                           r"\(byte 0xe9 at column 15\)"):
        load_problem(path)


def test_import_lists_a_seed_with_bad_bytes_by_file_and_line_and_keeps_the_rest(tmp_path):
    root = tmp_path / "seeds"
    root.mkdir()
    (root / "1_Good.py").write_text(GOOD)
    (root / "2_Latin.py").write_bytes(GOOD.replace("x):", "x):  # r\xe9sum\xe9")
                                      .replace("N = 64", "N = 32").encode("latin-1"))
    out = tmp_path / "seeds.jsonl"
    result = import_folder(root, out)
    assert result.stats.n_kept == 1
    assert result.malformed == [f"{root / '2_Latin.py'}:13: cannot read file: not UTF-8 "
                                "(byte 0xe9 at column 31)"]
    assert "\ufffd" not in out.read_text(encoding="utf-8")


def test_synth_names_a_seed_with_bad_bytes(tmp_path, caplog):
    from kernelmill.synth.generate import load_seeds

    (tmp_path / "good.py").write_text(GOOD)
    (tmp_path / "latin.py").write_bytes(GOOD.replace("a vector", "a v\xe9ctor").encode("latin-1"))
    with caplog.at_level(logging.WARNING, logger="kernelmill"):
        seeds = load_seeds(tmp_path)
    assert [s.name for s in seeds] == ["good"]
    assert f"{tmp_path / 'latin.py'}:1: cannot read file: not UTF-8" in caplog.text


def test_empty_input_is_one_error(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_text("\n\n")
    assert list(read_records(path)) == []  # readers that allow it still get nothing
    with pytest.raises(KernelmillError, match=rf"^{path}: no records \(the file is empty\)$"):
        list(read_records(path, allow_empty=False))


def test_input_of_another_schema_is_one_error(tmp_path):
    path = tmp_path / "submissions.jsonl"
    rows = [{"submission_id": f"s{i}", "problem_id": "p", "code": "x"} for i in range(3)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + "[1, 2]\n")
    with pytest.raises(KernelmillError) as info:
        list(read_records(path, allow_empty=False, on_error=lambda _m: None))
    message = str(info.value)
    assert message.startswith(f"{path}: none of its 4 row(s) is a problem record (first: ")
    assert "lacks required field(s): id, source" in message and "\n" not in message
    # one good row among them is enough: the rest are skipped with a warning each
    path.write_text(path.read_text() + json.dumps(_records(1)[0].to_dict()) + "\n")
    assert len(list(read_records(path, allow_empty=False, on_error=lambda _m: None))) == 1


def test_import_and_export_refuse_empty_input(tmp_path):
    (tmp_path / "none").mkdir()
    with pytest.raises(KernelmillError, match="no problem files"):
        import_folder(tmp_path / "none", tmp_path / "out.jsonl")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "1_Nothing.py").write_text("x = 1\n")
    with pytest.raises(KernelmillError, match=r"none of its 1 file\(s\) is a KernelBench problem "
                                              r"\(first: .*1_Nothing.py:1: does not define"):
        import_folder(bad, tmp_path / "out.jsonl")
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(KernelmillError, match="no records"):
        export_kernelbench(tmp_path / "empty.jsonl", tmp_path / "kb")
    assert not (tmp_path / "kb").exists()


def test_reader_never_replaces_bytes_in_raw_rows(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'{"submission_id": "s1", "source": "caf\xc3\xa9"}\n'
                     b'{"submission_id": "s2", "source": "caf\xe9"}\n')
    rows = read_jsonl(path)
    assert next(rows)["source"] == "café"
    with pytest.raises(KernelmillError, match=rf"{path}:2: not UTF-8"):
        next(rows)


def test_publish_refuses_a_split_that_came_out_empty_unless_allowed(tmp_path):
    from kernelmill.splits.publish import publish_dataset

    splits = tmp_path / "splits"
    with JsonlWriter(splits / "train.jsonl") as out:
        for record in _records(2):
            out.write(record.replace(split="train"))
    (splits / "eval.jsonl").write_text("")
    with pytest.raises(KernelmillError, match=rf"^{splits}: the eval split came out empty; a "
                                              r"dataset without it is refused \(--allow-empty"):
        publish_dataset(splits, tmp_path / "dataset")
    assert not (tmp_path / "dataset").exists()
    stats = publish_dataset(splits, tmp_path / "dataset", allow_empty=True)
    assert stats.counts["train"] == 2 and "eval" not in stats.counts
