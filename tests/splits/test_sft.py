"""SFT export: verified, hack-free kernels, selected by speed and reasoning length, balanced over
categories, in TRL's chat format with the RL dataset's prompt; reasoning length as difficulty."""
from __future__ import annotations

import json

import pytest
from fixtures.dedup_sources import BASE, UNRELATED
from kernelmill.app.cli import main
from kernelmill.core.record import Record
from kernelmill.core.store import JsonlWriter, read_jsonl
from kernelmill.splits.prompt import prompt_messages
from kernelmill.splits.sft import SftConfig, export_sft, sft_pairs

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
    assert "attention" in summary.splitlines()[1]  # the balance table comes first
    pairs = [json.loads(line) for line in out.read_text().splitlines()]
    assert [p["submission_id"] for p in pairs] == ["s3", "s1"]  # fastest first; s2 repeats s1
    first, second = pairs
    assert first["problem"] == UNRELATED and first["kernel"].startswith("import torch")
    assert first["speedup_vs_eager"] == 2.5 and first["speedup_vs_inductor"] == 1.9
    assert first["reasoning"] is None and second["reasoning"] == "Fuse it."
    system, user, assistant = second["messages"]
    # the RL dataset's prompt, then the answer
    assert [system, user] == prompt_messages(UNRELATED, "triton")
    assert assistant["role"] == "assistant" and assistant["content"].startswith("Fuse it.")
    assert "class ModelNew" in assistant["content"]


def test_export_sft_needs_verdicts(tmp_path, capsys):
    write(tmp_path / "problems.jsonl", [Record.from_source(BASE, name="x").to_dict()])
    assert main(["export", str(tmp_path / "problems.jsonl"), "--format", "sft",
                 "--out", str(tmp_path / "o.jsonl")]) == 2
    assert "--verdicts" in capsys.readouterr().err


def words(n: int) -> str:
    return " ".join(f"w{i}" for i in range(n))


def kernel(tag: str) -> str:
    return f"# kernel {tag}\n{KERNEL}"


@pytest.fixture
def graded(tmp_path):
    """Six problems: "hot" (fused) with five verified kernels of varied speed and reasoning;
    three more fused problems with two kernels each; one attention, one reduction problem."""
    sources = {f"p{i}": BASE.replace("max=1.0", f"max={i + 1}.5") for i in range(6)}
    categories = {"p0": "fused", "p1": "fused", "p2": "fused", "p3": "fused",
                  "p4": "attention", "p5": "reduction"}
    records = {pid: Record.from_source(src, name=pid, category=categories[pid], level=2)
               for pid, src in sources.items()}
    ids = {pid: r.id for pid, r in records.items()}
    write(tmp_path / "problems.jsonl", [r.to_dict() for r in records.values()])
    # (submission, problem, speedup vs eager, reasoning words)
    plan = [("fast-verbose", "p0", 2.0, 300), ("fast-concise", "p0", 1.95, 20),
            ("medium", "p0", 1.5, 10), ("slow", "p0", 1.0, 5), ("fastest-rambling", "p0", 3.0, 5000),
            ("p1-a", "p1", 1.8, 40), ("p1-b", "p1", 1.2, 40),
            ("p2-a", "p2", 1.6, 40), ("p2-b", "p2", 1.1, 40),
            ("p3-a", "p3", 1.4, 40), ("p3-b", "p3", 1.0, 40),
            ("p4-a", "p4", 1.3, 40), ("p5-a", "p5", 1.2, 0)]
    write(tmp_path / "subs.jsonl", [
        {"submission_id": sid, "problem_id": ids[pid], "source": kernel(sid),
         "reasoning": words(n) if n else None} for sid, pid, _, n in plan])
    write(tmp_path / "verdicts.jsonl", [
        {"submission_id": sid, "problem_id": ids[pid], "correct": True, "hacks": [],
         "speedup_vs_eager": speed, "speedup_vs_inductor": None} for sid, pid, speed, _ in plan])
    return tmp_path, ids


def selected(result) -> list[str]:
    return [p["submission_id"] for p in result.pairs]


def test_selection_keeps_the_best_k_prefers_concise_reasoning_and_caps_length(graded):
    folder, ids = graded
    result = sft_pairs(folder / "problems.jsonl", folder / "verdicts.jsonl",
                       folder / "subs.jsonl", SftConfig(per_problem=2, max_share=1.0))
    hot = [p["submission_id"] for p in result.pairs if p["problem_id"] == ids["p0"]]
    # 5000 words > the 4096 cap; 1.95 is within 10% of 2.0, and its reasoning is shorter
    assert hot == ["fast-concise", "fast-verbose"]
    counts = result.stats.counts
    assert counts["dropped: reasoning too long"] == 1
    assert counts["dropped: beyond best k"] == 2  # medium, slow
    # no cap, a margin of zero: pure speed order
    result = sft_pairs(folder / "problems.jsonl", folder / "verdicts.jsonl",
                       folder / "subs.jsonl",
                       SftConfig(per_problem=2, max_share=1.0, max_reasoning_tokens=0,
                                 speed_margin=0.0))
    assert [p["submission_id"] for p in result.pairs if p["problem_id"] == ids["p0"]] == [
        "fastest-rambling", "fast-verbose"]


def test_balance_trims_the_over_full_category_weakest_first(graded):
    folder, _ = graded
    result = sft_pairs(folder / "problems.jsonl", folder / "verdicts.jsonl",
                       folder / "subs.jsonl", SftConfig(per_problem=2, max_share=0.5))
    by_category = {}
    for p in result.pairs:
        by_category.setdefault(p["category"], []).append(p["submission_id"])
    # fused had 8 pairs against 2 others: at most half of the output -> 2 fused pairs, the best
    # kernels (rank 0) of the fastest problems
    assert by_category == {"fused": ["fast-concise", "p1-a"], "attention": ["p4-a"],
                           "reduction": ["p5-a"]}
    assert result.stats.counts["dropped: balance: fused"] == 6
    lines = result.table.splitlines()
    fused = next(li for li in lines if li.startswith("fused"))
    assert fused.split()[1:] == ["11", "84.6%", "2", "50.0%"]  # 11 of 13 verified -> 2 of 4


def test_reasoning_length_is_a_difficulty_table(graded, tmp_path):
    folder, ids = graded
    out = tmp_path / "difficulty.jsonl"
    export_sft(folder / "problems.jsonl", folder / "verdicts.jsonl", folder / "subs.jsonl", out,
               what="difficulty")
    table = {row["problem_id"]: row for row in read_jsonl(out)}
    hot = table[ids["p0"]]
    # every verified kernel counts, the rambling one too: (300 + 20 + 10 + 5 + 5000) / 5
    assert hot["reasoning_length_mean"] == pytest.approx(1067.0)
    assert hot["verified_kernels"] == 5 and hot["unit"] == "words"
    assert table[ids["p5"]]["reasoning_length_mean"] is None  # no reasoning given
    assert table[ids["p1"]]["reasoning_length_mean"] == 40


def test_sft_trainer_runs_two_steps_on_the_export(graded, tmp_path):
    pytest.importorskip("trl")
    from datasets import load_dataset
    from fixtures.tiny_lm import tiny_model_and_tokenizer
    from trl import SFTConfig, SFTTrainer

    folder, _ = graded
    out = tmp_path / "sft.jsonl"
    export_sft(folder / "problems.jsonl", folder / "verdicts.jsonl", folder / "subs.jsonl", out,
               SftConfig(per_problem=2))
    train = load_dataset("json", data_files=str(out))["train"].select_columns(["messages"])
    model, tokenizer = tiny_model_and_tokenizer(
        [m["content"] for row in train for m in row["messages"]])
    args = SFTConfig(output_dir=str(tmp_path / "sft"), per_device_train_batch_size=2,
                     max_steps=2, logging_steps=1, report_to=[], use_cpu=True,
                     save_strategy="no", max_length=256, seed=0)
    trainer = SFTTrainer(model=model, processing_class=tokenizer, train_dataset=train, args=args)
    trainer.train()
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    assert len(losses) == 2 and all(loss > 0 for loss in losses)


def test_min_speedup_cpu_timings_and_hacked_apart_from_incorrect(tmp_path, capsys):
    """Issue 49, item 8: a correct kernel slower than eager is not "best"; CPU-timed verdicts
    need --allow-cpu-timings and come out marked; a hacked answer is counted as hacked even
    though the grader also marks it incorrect."""
    problem = Record.from_source(UNRELATED, name="mm_softmax", category="attention", level=2)
    pid = problem.id
    write(tmp_path / "problems.jsonl", [problem.to_dict()])
    write(tmp_path / "subs.jsonl", [{"submission_id": f"s{i}", "problem_id": pid,
                                     "source": kernel(str(i))} for i in range(6)])
    gpu = {"device": "cuda:0", "timing": {"method": "cuda_graph"}}
    write(tmp_path / "verdicts.jsonl", [
        {"submission_id": "s0", "problem_id": pid, "correct": True, "hacks": [],
         "speedup_vs_eager": 1.7, **gpu},
        {"submission_id": "s1", "problem_id": pid, "correct": True, "hacks": [],
         "speedup_vs_eager": 0.017, **gpu},                      # correct but 60x slower
        {"submission_id": "s2", "problem_id": pid, "correct": False,
         "hacks": ["torch_compute"], "speedup_vs_eager": None, **gpu},
        {"submission_id": "s3", "problem_id": pid, "correct": False, "hacks": [],
         "speedup_vs_eager": None, **gpu},
        {"submission_id": "s4", "problem_id": pid, "correct": True, "hacks": [],
         "speedup_vs_eager": 0.02, "device": "cpu", "timing": {"method": "perf_counter"}},
        {"submission_id": "s5", "problem_id": pid, "correct": True, "hacks": [],
         "speedup_vs_eager": None, **gpu},                       # correct, never timed
    ])
    args = ["export", str(tmp_path / "problems.jsonl"), "--format", "sft",
            "--verdicts", str(tmp_path / "verdicts.jsonl"),
            "--submissions", str(tmp_path / "subs.jsonl")]
    out = tmp_path / "sft.jsonl"
    assert main([*args, "--out", str(out)]) == 0
    summary = capsys.readouterr().out
    assert [r["submission_id"] for r in read_jsonl(out)] == ["s0"]
    for reason in ("1 dropped: slower than 1x eager", "1 dropped: hack detected",
                   "1 dropped: incorrect", "1 dropped: timed on cpu", "1 dropped: not timed"):
        assert reason in summary, reason
    assert next(iter(read_jsonl(out)))["timing_device"] == "cuda"

    assert main([*args, "--out", str(out), "--allow-cpu-timings", "--min-speedup", "0",
                 "--per-problem", "5"]) == 0
    rows = {r["submission_id"]: r for r in read_jsonl(out)}
    assert set(rows) == {"s0", "s1", "s4", "s5"}
    assert rows["s4"]["timing_device"] == "cpu" and rows["s1"]["timing_device"] == "cuda"
