"""Dedup: planted duplicates of each kind are found, unrelated problems are not joined."""
from __future__ import annotations

import json
import re

import numpy as np
from datasketch import MinHash
from hypothesis import given, settings
from hypothesis import strategies as st
from kernelmill.app.cli import main
from kernelmill.curate.dedup import (
    behaviour_key,
    dedup_records,
    minhash_signatures,
    near_components,
    record_keys,
)
from kernelmill.curate.features import extract
from kernelmill.core.interop import problem_files, record_from_file
from kernelmill.core.record import Record
from kernelmill.core.store import JsonlWriter, read_records

from fixtures.dedup_sources import BASE, REFORMATTED, RESIZED, SWAPPED, UNRELATED  # noqa: E402



def record(source: str, name: str, validation: dict | None = None, seed: str | None = None):
    r = Record.from_source(source, name=name, category="fused", level=2,
                           provenance={"seed": seed} if seed else None)
    r.validation = validation
    return r


def passed_validation(n_checks: int) -> dict:
    return {"passed": True, "checks": {f"c{i}": {"passed": True} for i in range(n_checks)}}


def test_exact_duplicate_with_reformat_renames_comments_is_dropped_keeping_best_validated():
    a = record(BASE, "base")
    b = record(REFORMATTED, "copy", validation=passed_validation(3))
    c = record(UNRELATED, "unrelated")
    assert a.id != b.id  # the record ids differ (local names) ...
    assert record_keys(BASE).exact_key == record_keys(REFORMATTED).exact_key  # ... the key not
    kept = dedup_records([a, b, c])
    assert [r.name for r in kept] == ["copy", "unrelated"]  # the validated copy wins
    # with equal validation the choice is the short/lexicographic id, whatever the order
    first = [r.id for r in dedup_records([record(BASE, "x"), record(REFORMATTED, "y")])]
    second = [r.id for r in dedup_records([record(REFORMATTED, "y"), record(BASE, "x")])]
    assert first == second == [min(a.id, b.id)]


def test_more_checks_passed_wins_over_fewer():
    a = record(BASE, "two", validation=passed_validation(2))
    b = record(REFORMATTED, "five", validation=passed_validation(5))
    assert [r.name for r in dedup_records([a, b])] == ["five"]
    failed = {"passed": False, "checks": {f"c{i}": {"passed": True} for i in range(9)}}
    assert [r.name for r in dedup_records([record(BASE, "fail", failed), a])] == ["two"]


def test_structural_key_meets_other_sizes_and_constant_names():
    base, resized, unrelated = (record_keys(s) for s in (BASE, RESIZED, UNRELATED))
    assert base.exact_key != resized.exact_key
    assert base.structural_key == resized.structural_key
    assert base.structural_key != unrelated.structural_key
    assert record_keys(SWAPPED).structural_key != base.structural_key


def test_structural_key_keeps_hyperparameters_that_change_the_computation():
    dense = BASE
    grouped = BASE.replace("padding=1)", "padding=1, groups=4)")
    no_bias = BASE.replace("padding=1)", "padding=1, bias=False)")
    keys = {record_keys(s).structural_key for s in (dense, grouped, no_bias)}
    assert len(keys) == 3


def test_op_names_are_normalized_across_call_forms():
    def forward(body: str, init: str = "") -> list[str]:
        src = ("import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"
               "from torch.nn.functional import relu as r\n"
               f"class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
               f"        {init or 'pass'}\n    def forward(self, x):\n        return {body}\n"
               "def get_inputs():\n    return [torch.randn(4, 4)]\n"
               "def get_init_inputs():\n    return []\n")
        return extract(src).ops

    forms = [forward("torch.relu(x)"), forward("F.relu(x)"), forward("x.relu()"),
             forward("torch.nn.functional.relu(x)"), forward("r(x)"),
             forward("self.act(x)", "self.act = nn.ReLU()")]
    assert all(ops == ["relu"] for ops in forms), forms
    assert forward("x @ x.t()") == ["t", "matmul"]
    assert forward("torch.matmul(x, x.t())") == ["t", "matmul"]


def test_near_group_joins_a_swapped_epilogue_but_not_unrelated():
    records = [record(BASE, "base"), record(SWAPPED, "swapped"), record(UNRELATED, "other")]
    kept = dedup_records(records)
    groups = {r.name: r.dedup["near_group"] for r in kept}
    assert groups["base"] == groups["swapped"] == min(records[0].id, records[1].id)
    assert groups["other"] == records[2].id


def test_behaviour_key_from_planted_aten_ops():
    relu_a = BASE.replace("return torch.tanh(y)", "return torch.relu(y)")
    relu_b = UNRELATED.replace("torch.softmax(scores, dim=-1)", "torch.clamp(scores, min=0)")
    trace = {"aten_ops": ["aten::convolution", "aten::relu"], "probe_stats": {"mean": 0.123456}}
    near_same = dict(trace, probe_stats={"mean": 0.1234561})
    a = record(relu_a, "a", validation=trace)
    b = record(relu_b, "b", validation=near_same)
    c = record(UNRELATED, "c", validation={"aten_ops": ["aten::mm", "aten::softmax"]})
    kept = {r.name: r.dedup for r in dedup_records([a, b, c])}
    assert kept["a"]["behaviour_key"] == kept["b"]["behaviour_key"] is not None
    assert kept["a"]["structural_key"] != kept["b"]["structural_key"]
    assert kept["c"]["behaviour_key"] not in (None, kept["a"]["behaviour_key"])
    assert behaviour_key(None) is None and behaviour_key({"passed": True}) is None


def test_signatures_equal_datasketch_minhash():
    rng = np.random.default_rng(0)
    sets = [rng.integers(0, 2**32, size=int(rng.integers(1, 80)), dtype=np.uint64)
            .astype(np.uint32) for _ in range(40)]
    sig = minhash_signatures(sets, chunk=64)
    for i in (0, 17, 39):
        reference = MinHash(num_perm=128, seed=1, scheme="affine32", hashfunc=int)
        reference.update_batch(sets[i].tolist())
        assert np.array_equal(reference.hashvalues, sig[i])


def test_near_components_verify_candidates_and_chain():
    rng = np.random.default_rng(1)
    base = rng.integers(0, 2**32, size=200, dtype=np.uint64).astype(np.uint32)
    similar = base.copy()
    similar[:12] = rng.integers(0, 2**32, size=12, dtype=np.uint64)  # Jaccard ~0.89
    different = rng.integers(0, 2**32, size=200, dtype=np.uint64).astype(np.uint32)
    sig = minhash_signatures([base, similar, different, base.copy()])
    roots = near_components(sig, 0.8)
    assert roots[0] == roots[1] == roots[3] != roots[2]
    assert near_components(sig, 0.99)[1] != near_components(sig, 0.99)[0]


LOCAL = re.compile(r"(?<!\.)\b(y|mean)\b")  # names, not the .mean method


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(["a", "tmp", "hidden", "v9", "out_", "q"]),
       st.sampled_from(["m", "mu", "avg", "center"]))
def test_exact_key_ignores_any_local_renaming(new_y, new_mean):
    body_start = BASE.index("    def forward")
    body_end = BASE.index("def get_inputs")
    body = LOCAL.sub(lambda m: new_y if m.group(1) == "y" else new_mean,
                     BASE[body_start:body_end])
    renamed = BASE[:body_start] + body + BASE[body_end:]
    assert extract(renamed).exact == extract(BASE).exact


def test_seed_problems_are_distinct(seeds_dir):
    records = [record_from_file(p) for p in problem_files(seeds_dir)]
    kept = dedup_records(records)
    assert len(kept) == len(records)  # no seed is an exact duplicate of another
    near = {r.dedup["near_group"] for r in kept}
    assert len(near) == len(records)  # nor a near duplicate


def test_dedup_cli_writes_sections_and_drops_unparsable(tmp_path, seeds_dir, capsys):
    raw = tmp_path / "raw.jsonl"
    with JsonlWriter(raw) as writer:
        for path in problem_files(seeds_dir)[:10]:
            writer.write(record_from_file(path))
        writer.write(record(BASE, "base"))
        writer.write(record(REFORMATTED, "copy"))
        writer.write(record(RESIZED, "resized"))
        broken = record(UNRELATED, "broken").to_dict()
        broken["source"] = "def broken(:\n"
        writer.write(broken)
    out = tmp_path / "dedup.jsonl"
    assert main(["dedup", str(raw), "--out", str(out)]) == 0
    summary = capsys.readouterr().out
    assert "1 dropped: exact_duplicate" in summary and "1 dropped: unparsable" in summary
    kept = list(read_records(out))
    assert len(kept) == 12
    assert all(set(r.dedup) >= {"exact_key", "structural_key", "near_group", "behaviour_key"}
               for r in kept)
    by_name = {r.name: r for r in kept}
    assert by_name["base"].dedup["structural_key"] == by_name["resized"].dedup["structural_key"]
    # rerunning resumes: nothing is written twice
    assert main(["dedup", str(raw), "--out", str(out)]) == 0
    assert len(out.read_text().splitlines()) == 12
    assert json.loads(out.read_text().splitlines()[0])["dedup"]["ops"]


def test_dedup_rejects_a_bad_threshold(tmp_path, capsys):
    raw = tmp_path / "raw.jsonl"
    with JsonlWriter(raw) as writer:
        writer.write(record(BASE, "base"))
    assert main(["dedup", str(raw), "--out", str(tmp_path / "o.jsonl"),
                 "--threshold", "1.5"]) == 2
    assert "threshold" in capsys.readouterr().err


def test_parallel_keys_equal_serial(monkeypatch):
    from kernelmill.curate import dedup

    monkeypatch.setattr(dedup, "_PARALLEL_FROM", 8)
    monkeypatch.setattr(dedup, "_CHUNK", 5)
    sources = [BASE, RESIZED, SWAPPED, UNRELATED] * 6
    serial = dedup.keys_for_sources(sources[:4], workers=1)
    parallel = dedup.keys_for_sources(sources, workers=2)
    assert len(parallel) == len(sources)
    for i in range(4):
        assert parallel[i + 4].exact_key == serial[i].exact_key
        assert np.array_equal(parallel[i].signature, serial[i].signature)
        assert parallel[i].ops == serial[i].ops and parallel[i].ops
