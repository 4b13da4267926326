"""Split: families never straddle, fractions hold, benchmark copies are caught, others are not."""
from __future__ import annotations

import json

import pytest
from kernelmill.app.cli import main
from kernelmill.curate.dedup import dedup_records
from kernelmill.core.interop import problem_files, record_from_file
from kernelmill.core.record import Record
from kernelmill.core.store import JsonlWriter, read_records
from kernelmill.splits.contamination import NGRAM, fingerprint
from kernelmill.splits.split import split_records
from conftest import ROOT
from fixtures.dedup_sources import BASE, REFORMATTED, RESIZED, SWAPPED, UNRELATED

# A KernelBench-style benchmark problem ...
BENCH = BASE.replace('"""Conv, GroupNorm', '"""Benchmark: conv, GroupNorm')
# ... and its copy in the training pool: renamed variables, other sizes, reformatted.
COPY = (REFORMATTED.replace("BATCH = 16", "BATCH = 2").replace("HEIGHT = 64", "HEIGHT = 224")
        .replace("WIDTH = 64", "WIDTH = 224").replace("OUT_CHANNELS = 32", "OUT_CHANNELS = 96"))
# ... a larger problem that pastes the benchmark's computation and adds an epilogue chain.
EMBEDDED = BASE.replace(
    "        return torch.tanh(y)",
    "        y = torch.tanh(y)\n        z = F.softplus(y) * 0.5 + torch.exp(-y.abs())\n"
    "        z = torch.cumsum(z, dim=1) / z.shape[1]\n        w = torch.logsumexp(z, dim=1)\n"
    "        return w.unsqueeze(1) * z - torch.amax(z, dim=(2, 3), keepdim=True)")


def seeds(seeds_dir) -> list[Record]:
    return [record_from_file(p) for p in problem_files(seeds_dir)]


def planted_family() -> list[Record]:
    """Four problems related only through dedup keys and provenance, not through ids."""
    base = Record.from_source(BASE, name="planted_base", category="fused", level=2)
    resized = Record.from_source(RESIZED, name="planted_resized", category="fused", level=2)
    swapped = Record.from_source(SWAPPED, name="planted_swapped", category="fused", level=2)
    child = Record.from_source(UNRELATED.replace("16.0", "8.0").replace("M = 512", "M = 64"),
                               name="planted_child", category="attention", level=2,
                               provenance={"seed": base.id, "parent": base.id})
    return [base, resized, swapped, child]


@pytest.fixture(scope="module")
def pool(request):
    from pathlib import Path

    seeds_dir = ROOT / "data" / "seeds"
    return dedup_records(seeds(seeds_dir) + planted_family())


def copies(records: list[Record]) -> list[Record]:
    return [Record.from_dict(json.loads(json.dumps(r.to_dict()))) for r in records]


def test_planted_family_is_never_split_across_seeds(pool):
    names = {"planted_base", "planted_resized", "planted_swapped", "planted_child"}
    sides_seen = set()
    for seed in range(25):
        train, evals, _ = split_records(copies(pool), eval_fraction=0.3, seed=seed)
        side = {r.name: r.split for r in train + evals if r.name in names}
        assert len(side) == 4 and len(set(side.values())) == 1, (seed, side)
        sides_seen.add(next(iter(side.values())))
        groups = {r.split_group for r in train + evals if r.name in names}
        assert len(groups) == 1
        # no family anywhere straddles the split
        by_group: dict[str, set[str]] = {}
        for r in train + evals:
            by_group.setdefault(r.split_group, set()).add(r.split)
        assert all(len(s) == 1 for s in by_group.values())
    assert sides_seen == {"train", "eval"}  # the family does land on either side by seed


def test_eval_fraction_and_determinism(pool):
    n = len(pool)
    for fraction in (0.1, 0.2, 0.5):
        train, evals, _ = split_records(copies(pool), eval_fraction=fraction, seed=1)
        assert len(train) + len(evals) == n
        assert abs(len(evals) / n - fraction) <= 0.06, (fraction, len(evals))
    a = split_records(copies(pool), eval_fraction=0.2, seed=7)
    b = split_records(copies(pool)[::-1], eval_fraction=0.2, seed=7)
    assert sorted(r.id for r in a[1]) == sorted(r.id for r in b[1])
    c = split_records(copies(pool), eval_fraction=0.2, seed=8)
    assert sorted(r.id for r in a[1]) != sorted(r.id for r in c[1])


def test_strata_are_spread(pool):
    _train, evals, _ = split_records(copies(pool), eval_fraction=0.25, seed=0)
    eval_categories = {r.category for r in evals}
    big = {c for c in {r.category for r in pool} if sum(r.category == c for r in pool) >= 8}
    assert big <= eval_categories  # every sizeable category is represented in eval


def test_ngram_window_catches_a_pasted_copy():
    bench, embedded = fingerprint(BENCH), fingerprint(EMBEDDED)
    assert bench.structural_key != embedded.structural_key
    shared = set(bench.windows.tolist()) & set(embedded.windows.tolist())
    assert len(bench.windows) > 0 and shared


def write_bench(folder, extra_records: list[Record] | None = None):
    level = folder / "level2"
    level.mkdir(parents=True)
    (level / "1_Conv_GroupNorm_Swish.py").write_text(BENCH)
    (level / "2_Broken.py").write_text("import torch\nclass Model:\n    pass\n")  # malformed
    return folder


def test_against_drops_copies_and_not_unrelated(tmp_path, seeds_dir, capsys):
    records = seeds(seeds_dir) + [
        Record.from_source(COPY, name="renamed_resized_copy", category="fused", level=2),
        Record.from_source(EMBEDDED, name="pasted_into_larger", category="fused", level=3),
        Record.from_source(SWAPPED, name="epilogue_swapped", category="fused", level=2),
    ]
    raw = tmp_path / "raw.jsonl"
    with JsonlWriter(raw) as writer:
        for r in records:
            writer.write(r)
    bench = write_bench(tmp_path / "KernelBench")
    out = tmp_path / "split"
    assert main(["split", str(raw), "--out", str(out), "--eval-fraction", "0.2",
                 "--against", str(bench)]) == 0
    assert "3 dropped: contaminated" in capsys.readouterr().out
    report = json.loads((out / "contamination.json").read_text())
    assert report["policy"] == "drop" and report["ngram"] == NGRAM
    assert report["benchmarks"][0]["items"] == 1 and len(report["benchmarks"][0]["skipped"]) == 1
    found = {p["name"]: p["matches"][0] for p in report["problems"]}
    assert set(found) == {"renamed_resized_copy", "pasted_into_larger", "epilogue_swapped"}
    assert found["renamed_resized_copy"]["key"] == "structural"
    assert found["pasted_into_larger"]["key"] == "ngram"
    assert found["epilogue_swapped"]["key"] == "near"
    assert 0.8 <= found["epilogue_swapped"]["score"] < 1.0
    assert all(m["item"].endswith("1_Conv_GroupNorm_Swish.py") for m in found.values())
    kept = list(read_records(out / "train.jsonl")) + list(read_records(out / "eval.jsonl"))
    assert len(kept) == len(records) - 3
    assert not {r.name for r in kept} & set(found)
    md = (out / "contamination.md").read_text()
    assert "renamed_resized_copy" in md and "structural" in md


def test_keep_contaminated_marks_and_records_benchmark(tmp_path, seeds_dir):
    bench_records = tmp_path / "bench.jsonl"
    with JsonlWriter(bench_records) as writer:
        writer.write(Record.from_source(BENCH, name="bench_conv", category="fused"))
    raw = tmp_path / "raw.jsonl"
    with JsonlWriter(raw) as writer:
        for r in seeds(seeds_dir)[:20]:
            writer.write(r)
        writer.write(Record.from_source(COPY, name="copy", category="fused", level=2))
    out = tmp_path / "split"
    assert main(["split", str(raw), "--out", str(out), "--against", str(bench_records),
                 "--keep-contaminated"]) == 0
    kept = list(read_records(out / "train.jsonl")) + list(read_records(out / "eval.jsonl"))
    assert len(kept) == 21
    marked = [r for r in kept if r.contamination is not None]
    assert [r.name for r in marked] == ["copy"]
    assert marked[0].contamination["matches"][0]["item_name"] == "bench_conv"
    report = json.loads((out / "contamination.json").read_text())
    assert report["policy"] == "mark" and report["problems"][0]["action"] == "marked"


def test_missing_benchmark_is_one_line_error(tmp_path, capsys):
    raw = tmp_path / "raw.jsonl"
    with JsonlWriter(raw) as writer:
        writer.write(Record.from_source(BASE, name="base"))
    assert main(["split", str(raw), "--out", str(tmp_path / "o"),
                 "--against", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert "no such benchmark" in err and len(err.strip().splitlines()) == 1


def test_parallel_fingerprinting_finds_the_same(tmp_path, seeds_dir, monkeypatch):
    from kernelmill.curate import dedup

    bench = write_bench(tmp_path / "bench")
    records = seeds(seeds_dir)[:30] + [Record.from_source(COPY, name="copy", category="fused")]
    serial = split_records(copies(records), against=[bench])[2]["entries"]
    monkeypatch.setattr(dedup, "_PARALLEL_FROM", 4)
    monkeypatch.setattr(dedup, "_CHUNK", 8)
    parallel = split_records(copies(records), against=[bench])[2]["entries"]
    assert [e["name"] for e in serial] == [e["name"] for e in parallel] == ["copy"]
    assert serial == parallel
