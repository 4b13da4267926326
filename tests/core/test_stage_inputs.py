"""Every stage command given an empty input, or one whose rows are not its schema, ends in one
line naming the file and a non-zero exit; publish refuses an empty split unless told."""
from __future__ import annotations

import json

import pytest

from conftest import run_cli
from kernelmill.core.record import Record
from kernelmill.core.store import JsonlWriter

SUBMISSION = {"submission_id": "s1", "problem_id": "p1", "source": "class ModelNew: pass\n"}

# (command, its input folder or file, the arguments after it); "{in}" and "{out}" are filled in
COMMANDS = [
    ("concat", "{in} --out {out}/o.jsonl"),
    ("validate", "{in} --out {out}/o.jsonl --device cpu"),
    ("filter", "{in} --out {out}/o.jsonl"),
    ("dedup", "{in} --out {out}/o.jsonl"),
    ("cluster", "{in} --out {out}/o.jsonl"),
    ("split", "{in} --out {out}/splits"),
    ("export", "{in} --out {out}/kb"),
    ("grade", "--problems {in} --submissions {in} --out {out}/v.jsonl --device cpu"),
]


@pytest.mark.parametrize("content, message", [
    ("", "no records (the file is empty)"),
    (json.dumps(SUBMISSION) + "\n", "row(s) is a problem record"),
], ids=["empty", "other_schema"])
@pytest.mark.parametrize("command, args", COMMANDS, ids=[c for c, _ in COMMANDS])
def test_stage_commands_refuse_input_with_no_record(tmp_path, command, args, content, message):
    given = tmp_path / "input.jsonl"
    given.write_text(content)
    run = run_cli(command, *args.format(**{"in": given, "out": tmp_path}).split())
    assert run.returncode == 2, (run.stdout, run.stderr)
    error = run.stderr.strip().splitlines()[-1]
    assert error.startswith(f"kernelmill: error: {given}: "), run.stderr
    if command in ("grade", "export"):  # problems read as grade reads them (rows need id and
        # source, or problem_id and reference); grade's problems file fails first
        assert "no problems" in error, error
    elif command == "concat":
        assert error.endswith("no records in any input"), error
    else:
        assert message in error, error


def test_import_of_a_folder_without_problems_is_one_error(tmp_path):
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "1_Nothing.py").write_text("x = 1\n")
    run = run_cli("import", str(tmp_path / "bench"), "--out", str(tmp_path / "o.jsonl"))
    assert run.returncode == 2
    assert run.stderr.strip().splitlines()[-1].startswith(
        f"kernelmill: error: {tmp_path / 'bench'}: none of its 1 file(s) is a KernelBench problem")


def test_publish_refuses_an_empty_split_unless_allowed(tmp_path, seeds_dir):
    splits = tmp_path / "splits"
    with JsonlWriter(splits / "train.jsonl") as out:
        for path in sorted(seeds_dir.glob("*.py"))[:2]:
            out.write(Record.from_source(path.read_text(), name=path.stem, category="other")
                      .replace(split="train"))
    (splits / "eval.jsonl").write_text("")
    run = run_cli("publish", str(splits), "--out", str(tmp_path / "dataset"))
    assert run.returncode == 2
    assert run.stderr.strip().splitlines()[-1] == (
        f"kernelmill: error: {splits}: the eval split came out empty; a dataset without it is "
        "refused (--allow-empty publishes it anyway)")
    assert not (tmp_path / "dataset" / "data").exists()
    run = run_cli("publish", str(splits), "--out", str(tmp_path / "dataset"), "--allow-empty")
    assert run.returncode == 0, run.stderr
    assert [p.name for p in (tmp_path / "dataset" / "data").iterdir()] == [
        "train-00000-of-00001.parquet"]
