"""Loader, canonical ids, record round trip, JSONL store (resume, corrupt lines), interop, CLI."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from kernelmill.core import (JsonlWriter, ProblemError, Record, check_source, load_problem,
                               read_records, source_id)
from kernelmill.core.interop import export_kernelbench, import_folder

GOOD = '''"""Scaled tanh of a matrix.

category: activation
level: 1
"""
import torch
import torch.nn as nn

N = 64


class Model(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return torch.tanh(x * self.scale)


def get_inputs():
    return [torch.randn(N, N)]


def get_init_inputs():
    return [0.5]
'''


def test_check_source_reads_metadata_and_arity():
    problem = check_source(GOOD, "good.py")
    assert problem.category == "activation"
    assert problem.level == 1
    assert problem.description == "Scaled tanh of a matrix."
    assert problem.forward_arity == (1, 1)
    assert problem.n_inputs == 1
    assert problem.name == "good"


@pytest.mark.parametrize("source, message, line", [
    (GOOD.replace("def forward(self, x):", "def forward(self, x:"), "syntax error", 17),
    (GOOD.replace("def get_inputs", "def make_inputs"), "does not define get_inputs", 1),
    (GOOD.replace("class Model", "class Net"), "does not define Model", 1),
    (GOOD.replace("return [torch.randn(N, N)]", "return [torch.randn(N, N), torch.randn(N)]"),
     "get_inputs() returns 2 input(s) but Model.forward takes 1", 17),
    (GOOD.replace("return [0.5]", "return [0.5, 2]"),
     "get_init_inputs() returns 2 value(s) but Model.__init__ takes 1", 13),
    (GOOD.replace("category: activation", "category: wizardry"), "unknown category", 1),
])
def test_check_source_names_file_and_line(source, message, line):
    with pytest.raises(ProblemError) as info:
        check_source(source, "bad.py")
    assert message in str(info.value)
    assert str(info.value).startswith(f"bad.py:{line}: ")


def test_candidate_needs_model_new_only():
    candidate = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n" \
                "        return x\n"
    assert check_source(candidate, candidate=True).model_class == "ModelNew"
    with pytest.raises(ProblemError, match="does not define ModelNew"):
        check_source(GOOD, candidate=True)


def test_ids_ignore_comments_docstrings_and_formatting():
    reformatted = GOOD.replace('"""Scaled tanh of a matrix.', '"""Another description.') \
        .replace("return torch.tanh(x * self.scale)",
                 "# a comment\n        return torch.tanh( x*self.scale )  # trailing")
    assert source_id(reformatted) == source_id(GOOD)
    assert source_id(GOOD.replace("N = 64", "N = 65")) != source_id(GOOD)


def test_record_round_trip_keeps_unknown_sections():
    record = Record.from_source(GOOD, name="tanh", category="activation")
    data = record.to_dict()
    data["verdicts"] = {"n": 3}
    again = Record.from_dict(json.loads(json.dumps(data)))
    assert again == Record.from_dict(data)
    assert again.to_dict()["verdicts"] == {"n": 3}
    assert again.family == record.id
    with pytest.raises(ValueError, match="source"):
        Record.from_dict({"id": "x"})


def test_writer_resumes_and_reader_survives_corrupt_lines(tmp_path):
    path = tmp_path / "r.jsonl"
    records = [Record.from_source(GOOD.replace("N = 64", f"N = {n}"), name=f"p{n}")
               for n in range(10, 15)]
    with JsonlWriter(path) as out:
        assert all(out.write(r) for r in records[:3])
    # a killed writer leaves half a line behind
    with path.open("a") as handle:
        handle.write('{"id": "half", "sour')
    with JsonlWriter(path) as out:  # resume: known ids are skipped, the partial tail moved aside
        written = [out.write(r) for r in records]
    assert written == [False, False, False, True, True]
    assert (tmp_path / "r.jsonl.partial").read_text().startswith('{"id": "half"')
    lines = path.read_text().splitlines()
    lines.insert(2, "{not json")
    lines.insert(4, "[1, 2]")
    path.write_text("\n".join(lines) + "\n")
    errors = []
    got = [r.id for r in read_records(path, on_error=errors.append)]
    assert got == [r.id for r in records]
    assert len(errors) == 2
    assert errors[0].startswith(f"{path}:3: ")
    assert errors[1].startswith(f"{path}:5: ")


def test_a_resumed_writer_takes_out_the_records_it_is_told_to_redo(tmp_path):
    real = tmp_path / "kept" / "v.jsonl"
    real.parent.mkdir()
    path = tmp_path / "v.jsonl"  # the run's --out is a link to the file
    path.symlink_to(real)
    with JsonlWriter(path, key="sid") as out:
        for sid, state in (("a", "final"), ("b", "retry"), ("c", "final"), ("d", None)):
            out.write({"sid": sid, "state": state})
    real.chmod(0o640)
    with path.open("a") as handle:
        handle.write("{not json\n")

    def redo(row):  # raises on d's state: a row it cannot judge is kept
        return row["state"].startswith("retry")

    # a run stopped before it wrote b again loses nothing: b is still there, still to redo
    stopped = JsonlWriter(path, key="sid", redo=redo)
    assert stopped.redone == 1 and stopped.taken == {"b": {"sid": "b", "state": "retry"}}
    assert "b" not in stopped and "a" in stopped and "d" in stopped
    stopped._handle.close()  # killed: close() never runs
    # one stopped after it wrote b again, before it compacted: the last record counts
    with JsonlWriter(path, key="sid", redo=redo) as out:
        assert out.redone == 1
        assert not out.write({"sid": "a", "state": "again"})
        assert out.write({"sid": "b", "state": "final"})
        out._rewritten.clear()  # killed before close() compacts
    assert real.read_text().count('"sid":"b"') == 2
    with JsonlWriter(path, key="sid", redo=redo) as out:
        assert out.redone == 0 and "b" in out
    assert path.is_symlink() and real.stat().st_mode & 0o777 == 0o640
    lines = real.read_text().splitlines()
    assert lines[3] == "{not json"  # an unreadable line stays where it was
    assert [json.loads(line)["state"] for line in lines if line != "{not json"] == \
        ["final", "final", None, "final"]
    with JsonlWriter(path, key="sid", redo=redo) as out:
        assert out.redone == 0  # nothing picked: the file is not rewritten
    assert not list(tmp_path.rglob("*.redo"))
    # written again and closed: the earlier record is dropped then, the rest stays in order
    with JsonlWriter(path, key="sid") as out:
        out.write({"sid": "e", "state": "retry"})
    with JsonlWriter(path, key="sid", redo=redo) as out:
        assert out.write({"sid": "e", "state": "final"})
        assert real.read_text().count('"sid":"e"') == 2  # both until it closes
    assert [json.loads(line)["sid"] for line in real.read_text().splitlines()
            if line != "{not json"] == ["a", "c", "d", "b", "e"]
    assert json.loads(real.read_text().splitlines()[-1]) == {"sid": "e", "state": "final"}


def test_import_reports_malformed_files_and_keeps_the_rest(tmp_path, seeds_dir):
    tree = tmp_path / "KernelBench" / "level2"
    tree.mkdir(parents=True)
    (tree / "1_Good_tanh.py").write_text(GOOD)
    (tree / "2_Broken.py").write_text(GOOD.replace("return [0.5]", "return [0.5"))
    (tree / "3_NoInputs.py").write_text(GOOD.replace("def get_inputs", "def inputs"))
    out = tmp_path / "problems.jsonl"
    result = import_folder(tmp_path / "KernelBench", out)
    assert result.stats.n_kept == 1
    assert len(result.malformed) == 2
    assert any("2_Broken.py:" in m and "syntax error" in m for m in result.malformed)
    assert any("3_NoInputs.py:1: does not define get_inputs" in m for m in result.malformed)
    (record,) = read_records(out)
    assert record.level == 2 and record.name == "Good_tanh"
    # rerun: nothing is written twice
    assert import_folder(tmp_path / "KernelBench", out).stats.counts["already present"] == 1


def test_import_accepts_relative_roots_and_skips_hidden_folders(tmp_path, monkeypatch):
    root = tmp_path / "bench"
    (root / ".cache").mkdir(parents=True)
    (root / "1_Good.py").write_text(GOOD)
    (root / ".cache" / "2_Hidden.py").write_text(GOOD.replace("N = 64", "N = 32"))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    result = import_folder(Path("..") / "bench", tmp_path / "out.jsonl")
    assert result.stats.n_kept == 1 and not result.malformed


def test_seed_import_export_round_trip(tmp_path, seeds_dir):
    out = tmp_path / "seeds.jsonl"
    result = import_folder(seeds_dir, out)
    n_seeds = len(list(seeds_dir.glob("*.py")))
    assert result.stats.n_kept == n_seeds and not result.malformed
    counts = export_kernelbench(out, tmp_path / "kb")
    assert sum(counts.values()) == n_seeds
    again = tmp_path / "again.jsonl"
    import_folder(tmp_path / "kb", again)
    original = {r.id: r for r in read_records(out)}
    reimported = {r.id: r for r in read_records(again)}
    assert set(original) == set(reimported)
    for rid, record in reimported.items():
        assert record.level == original[rid].level
        assert record.category == original[rid].category


def test_cli_help_and_one_line_errors(tmp_path):
    run = subprocess.run([sys.executable, "-m", "kernelmill.app.cli", "--help"],
                         capture_output=True, text=True)
    assert run.returncode == 0 and "import" in run.stdout and "export" in run.stdout
    run = subprocess.run([sys.executable, "-m", "kernelmill.app.cli", "import",
                          str(tmp_path / "missing"), "--out", str(tmp_path / "x.jsonl")],
                         capture_output=True, text=True)
    assert run.returncode == 2
    assert run.stderr.strip().count("\n") == 0
    assert "no such file or folder" in run.stderr


def test_the_cli_loads_no_torch_to_start_or_to_refuse_a_bad_input(tmp_path):
    """torch takes about 1.7 s to import: help and a one-line refusal come without it."""
    probe = ("import runpy, sys\n"
             "sys.argv = ['kernelmill', *sys.argv[1:]]\n"
             "try:\n    runpy.run_module('kernelmill.app.cli', run_name='__main__')\n"
             "except SystemExit:\n    pass\n"
             "print('torch' in sys.modules)")
    for args in (["--help"], ["concat", str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "o")]):
        run = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True)
        assert run.stdout.strip().splitlines()[-1] == "False", (args, run.stdout, run.stderr)


def test_load_problem_unreadable_file(tmp_path):
    path = tmp_path / "latin.py"
    path.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(ProblemError, match="cannot read file"):
        load_problem(path)


def test_gpu_slots_follow_the_parents_own_visible_devices(monkeypatch):
    """A run started on GPUs 3 and 5 alone pins its workers to GPUs 3 and 5, not to the host's
    first two (a run on GPU 1 alone once ran every worker on GPU 0, beside another run)."""
    import torch

    from kernelmill.core.devices import device_slots

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    slots = device_slots("cuda")
    assert [(s["gpu"], s["env"]["CUDA_VISIBLE_DEVICES"], s["device"]) for s in slots] == \
        [(3, "3", "cuda:0"), (5, "5", "cuda:0")]
    assert [s["gpu"] for s in device_slots("cuda:1")] == [5]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-8dc80d46")
    assert device_slots("cuda:0")[0]["env"] == {"CUDA_VISIBLE_DEVICES": "GPU-8dc80d46"}
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert [s["gpu"] for s in device_slots("cuda")] == [0, 1]


def test_every_way_of_naming_one_gpu_keys_the_same_timing_lock(monkeypatch, tmp_path):
    """A slot may now carry the parent's own CUDA_VISIBLE_DEVICES entry, which CUDA accepts
    as an index, a full UUID or a UUID's unique prefix: all three take the same lock file, so
    two runs naming the GPU differently still never time at once."""
    from kernelmill.validate import gpus as W

    full = "GPU-8dc80d46-55c3-f013-8f3d-de6573368c61"
    monkeypatch.setattr(W, "_GPUS", {"0": (full, "NVIDIA H200"),
                                     "1": ("GPU-65f524f9-4169-fffe-6f48-685f8f00508c", "H200")})
    monkeypatch.setattr(W, "runtime_folder", lambda: str(tmp_path))
    paths = {W.gpu_lock_path("cuda:0", {"CUDA_VISIBLE_DEVICES": name})
             for name in ("0", full, "GPU-8dc80d46")}
    assert paths == {str(tmp_path / full)}
    assert W.gpu_name("cuda:0", {"CUDA_VISIBLE_DEVICES": "GPU-8dc80d46"}) == "NVIDIA H200"
    assert W.gpu_lock_path("cuda:0", {"CUDA_VISIBLE_DEVICES": "1"}) != paths.pop()
