"""Shipped KernelBench fingerprints: a default split or build checks against them with no
benchmark checkout, flags renamed and reformatted copies, and names what it checked."""
from __future__ import annotations

import gzip
import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT
from fixtures.dedup_sources import BASE
from kernelmill.app.build import Build, step_config
from kernelmill.app.config import BuildConfig
from kernelmill.app.stages import stages
from kernelmill.core.errors import KernelmillError
from kernelmill.core.record import Record
from kernelmill.core.store import JsonlWriter, read_records
from kernelmill.curate.dedup import NUM_PERM, minhash_signatures
from kernelmill.splits import contamination
from kernelmill.splits.contamination import (
    ContaminationIndex,
    fingerprint,
    load_benchmark,
)
from kernelmill.splits.contamination import (
    main as build_fingerprints,
)
from kernelmill.splits.publish import contamination_sentence
from kernelmill.splits.split import split_file

SHIPPED = ROOT / "data" / "fingerprints" / "kernelbench.json.gz"
KERNELBENCH = Path(os.environ.get("KERNELBENCH_DIR", ROOT.parent / "shared" / "benchmarks" /
                                  "kernelbench"))
needs_kernelbench = pytest.mark.skipif(not (KERNELBENCH / "level1").is_dir(),
                                       reason="no KernelBench tree (set KERNELBENCH_DIR)")

# KernelBench level2/1 (conv, relu, bias add) written again: other names, sizes, layout, comments.
REWRITTEN = '''"""My fused block.

category: fused
level: 2
"""
import torch
from torch import nn

N, C_IN, C_OUT, SIDE, KS = 4, 3, 16, 32, 5


class Model(nn.Module):
    def __init__(self, cin, cout, ks, shift_shape):
        super().__init__()
        self.layer = nn.Conv2d(cin, cout, ks)  # the convolution
        self.shift = nn.Parameter(torch.randn(shift_shape))

    def forward(self, inp):
        out = torch.relu(self.layer(inp))
        return out + self.shift


def get_inputs():
    return [torch.rand(N, C_IN, SIDE, SIDE)]


def get_init_inputs():
    return [C_IN, C_OUT, KS, (C_OUT, 1, 1)]
'''


def test_shipped_fingerprints_cover_levels_1_to_4_and_hold_no_source():
    bench = load_benchmark("builtin:kernelbench")
    assert bench.name == "KernelBench" and bench.kind == "fingerprints"
    assert bench.levels() == {"level1": 100, "level2": 100, "level3": 50, "level4": 20}
    assert len(bench.sha256) == 64
    sigs = np.stack([item.signature for item in bench.items])
    assert sigs.shape == (270, NUM_PERM)
    assert np.array_equal(sigs, minhash_signatures([item.fp.shingles for item in bench.items]))
    text = gzip.decompress(SHIPPED.read_bytes()).decode()
    for code in ("nn.Module", "def forward", "get_inputs", "torch.randn", "import torch"):
        assert code not in text
    assert json.loads(text)["levels"] == bench.levels()


@needs_kernelbench
def test_rebuilding_from_the_tree_gives_the_shipped_bytes(tmp_path):
    """Also what fails when feature or hashing code changed without rebuilding the file."""
    out = tmp_path / "kb.json.gz"
    assert build_fingerprints(["--build-fingerprints", str(KERNELBENCH), "--out", str(out),
                               "--levels", "level1", "level2", "level3", "level4",
                               "--name", "KernelBench", "--source",
                               "ScalingIntelligence/KernelBench@423217d (MIT)"]) == 0
    assert out.read_bytes() == SHIPPED.read_bytes()


def test_fingerprints_of_other_feature_code_are_refused(tmp_path):
    data = json.loads(gzip.decompress(SHIPPED.read_bytes()))
    data["canary"]["sha256"] = "0" * 64
    stale = tmp_path / "stale.json.gz"
    stale.write_bytes(gzip.compress(json.dumps(data).encode()))
    with pytest.raises(KernelmillError, match="rebuild"):
        load_benchmark(stale)
    (tmp_path / "bad.json.gz").write_bytes(b"not gzip")
    with pytest.raises(KernelmillError, match="not a benchmark fingerprint file"):
        load_benchmark(tmp_path / "bad.json.gz")
    with pytest.raises(KernelmillError, match="builtin:kernelbench"):
        load_benchmark("builtin:nope")


def test_default_build_config_flags_a_kernelbench_copy_without_a_checkout(tmp_path, seeds_dir,
                                                                          monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing named like a benchmark around
    build = Build(BuildConfig(out=str(tmp_path / "b")))
    split_step = next(s for s in stages() if s.name == "split")
    config = step_config(build, split_step)
    assert config.against == ["builtin:kernelbench"]
    raw = tmp_path / "raw.jsonl"
    with JsonlWriter(raw) as writer:
        writer.write(Record.from_source(REWRITTEN, name="my_fused_block", category="fused"))
        writer.write(Record.from_source(BASE, name="fresh_problem", category="fused"))
    out = tmp_path / "split"
    split_file(raw, out, against=config.against, threshold=config.threshold)
    report = json.loads((out / "contamination.json").read_text())
    assert [p["name"] for p in report["problems"]] == ["my_fused_block"]
    match = report["problems"][0]["matches"][0]
    assert match["item"] == "level2/1_Conv2D_ReLU_BiasAdd.py" and match["key"] == "structural"
    kept = [r.name for r in read_records(out / "train.jsonl")] + \
        [r.name for r in read_records(out / "eval.jsonl")]
    assert kept == ["fresh_problem"]
    bench = report["benchmarks"][0]
    assert bench["name"] == "KernelBench" and bench["items"] == 270
    assert bench["levels"] == {"level1": 100, "level2": 100, "level3": 50, "level4": 20}
    sentence = contamination_sentence(out / "contamination.json")
    assert "KernelBench (270 problems: level1 100, level2 100, level3 50, level4 20" in sentence
    assert bench["sha256"][:12] in sentence and "Not checked" not in sentence
    md = (out / "contamination.md").read_text()
    assert "KernelBench" in md and "level4 20" in md and bench["sha256"][:12] in md


def test_empty_against_says_not_checked(tmp_path):
    raw = tmp_path / "raw.jsonl"
    with JsonlWriter(raw) as writer:
        writer.write(Record.from_source(REWRITTEN, name="my_fused_block", category="fused"))
    split_file(raw, tmp_path / "split", against=[])
    assert contamination_sentence(tmp_path / "split" / "contamination.json").startswith(
        "Not checked")


def _disguise(source: str, i: int) -> str:
    """Rename ``x`` and the batch constant, resize, reindent to two spaces, add comments."""
    source = re.sub(r"\bx\b", "inp_tensor", source)
    source = re.sub(r"\bbatch_size\b", "BATCH_N", source)
    source = re.sub(r"(?m)^(\w+) = (\d+)[ \t]*$",
                    lambda m: f"{m.group(1)} = {int(m.group(2)) + 1}", source)
    source = re.sub(r"(?m)^((?:    )+)", lambda m: "  " * (len(m.group(1)) // 4), source)
    return f"# copied for a dataset ({i})\n" + source.replace("\n\n", "\n\n# --\n", 1)


@needs_kernelbench
def test_every_disguised_kernelbench_problem_is_caught_by_the_shipped_fingerprints():
    index = ContaminationIndex([load_benchmark("builtin:kernelbench")])
    missed = []
    files = sorted((KERNELBENCH).glob("level[1-4]/*.py"))
    assert len(files) == 270
    for i, path in enumerate(files):
        disguised = _disguise(path.read_text(), i)
        assert disguised != path.read_text()
        matches = index.matches(fingerprint(disguised))
        if not any(m.item == path.relative_to(KERNELBENCH).as_posix() for m in matches):
            missed.append(path.name)
    assert missed == []


def test_shipped_seeds_mostly_fresh():
    """The shipped seeds overlap KernelBench only where they are the same single op (a real
    finding the default build reports), not wholesale."""
    index = ContaminationIndex([load_benchmark("builtin:kernelbench")])
    seeds = sorted((ROOT / "data" / "seeds").glob("*.py"))
    flagged = [p.name for p in seeds if index.matches(fingerprint(p.read_text()))]
    assert len(flagged) < len(seeds) // 10
    assert contamination.DEFAULT_AGAINST == ("builtin:kernelbench",)
