"""SFT export: verified, hack-free kernels become (problem, reasoning, kernel, speedups) pairs."""
from __future__ import annotations

import json

from kernelmill.app.cli import main
from kernelmill.core.record import Record
from kernelmill.core.store import JsonlWriter
from fixtures.dedup_sources import BASE, UNRELATED

KERNEL = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, a, b):\n" \
         "        return torch.softmax(a @ b / 16.0, dim=-1)\n"


def write(path, rows):
    with JsonlWriter(path, key=next(iter(rows[0]))) as writer:
        for row in rows:
            writer.write(row)


def test_export_sft_pairs(tmp_path, capsys):
    problems = [Record.from_source(BASE, name="conv_gn", category="fused", level=2),
                Record.from_source(UNRELATED, name="mm_softmax", category="attention", level=2)]
    conv, mm = problems[0].id, problems[1].id
    write(tmp_path / "problems.jsonl", [r.to_dict() for r in problems])
    write(tmp_path / "subs.jsonl", [
        {"submission_id": "s1", "problem_id": mm, "source": KERNEL, "reasoning": "Fuse it."},
        {"submission_id": "s2", "problem_id": mm, "source": KERNEL + "\n"},  # same kernel again
        {"submission_id": "s3", "problem_id": mm, "source": KERNEL.replace("16.0", "16")},
        {"submission_id": "s4", "problem_id": conv, "source": "class ModelNew: pass\n"},
        {"submission_id": "s5", "problem_id": conv, "source": "import torch  # hack\n"},
        {"submission_id": "s6", "problem_id": "unknown", "source": KERNEL},
    ])
    write(tmp_path / "verdicts.jsonl", [
        {"submission_id": "s1", "problem_id": mm, "correct": True, "hacks": [],
         "speedup_vs_eager": 1.5, "speedup_vs_inductor": 1.1},
        {"submission_id": "s2", "problem_id": mm, "correct": True, "hacks": [],
         "speedup_vs_eager": 1.4, "speedup_vs_inductor": 1.0},
        {"submission_id": "s3", "problem_id": mm, "correct": True, "hacks": [],
         "speedup_vs_eager": 2.5, "speedup_vs_inductor": 1.9},
        {"submission_id": "s4", "problem_id": conv, "correct": False, "hacks": [],
         "speedup_vs_eager": None, "speedup_vs_inductor": None},
        {"submission_id": "s5", "problem_id": conv, "correct": True,
         "hacks": ["calls_reference_ops"], "speedup_vs_eager": 9.0, "speedup_vs_inductor": 9.0},
        {"submission_id": "s6", "problem_id": "unknown", "correct": True, "hacks": [],
         "speedup_vs_eager": 1.0, "speedup_vs_inductor": 1.0},
    ])
    out = tmp_path / "sft.jsonl"
    assert main(["export", str(tmp_path / "problems.jsonl"), "--format", "sft", "--out", str(out),
                 "--verdicts", str(tmp_path / "verdicts.jsonl"),
                 "--submissions", str(tmp_path / "subs.jsonl")]) == 0
    summary = capsys.readouterr().out
    assert "exported 2 SFT pair(s)" in summary and "1 dropped: hack detected" in summary
    pairs = [json.loads(line) for line in out.read_text().splitlines()]
    assert [p["submission_id"] for p in pairs] == ["s3", "s1"]  # fastest first; s2 repeats s1
    first, second = pairs
    assert first["problem"] == UNRELATED and first["kernel"].startswith("import torch")
    assert first["speedup_vs_eager"] == 2.5 and first["speedup_vs_inductor"] == 1.9
    assert first["reasoning"] is None and second["reasoning"] == "Fuse it."
    user, assistant = second["messages"]
    assert user["role"] == "user" and UNRELATED.strip() in user["content"]
    assert assistant["content"].startswith("Fuse it.") and "class ModelNew" in assistant["content"]


def test_export_sft_needs_verdicts(tmp_path, capsys):
    write(tmp_path / "problems.jsonl", [Record.from_source(BASE, name="x").to_dict()])
    assert main(["export", str(tmp_path / "problems.jsonl"), "--format", "sft",
                 "--out", str(tmp_path / "o.jsonl")]) == 2
    assert "--verdicts" in capsys.readouterr().err
