"""Clustering: problems that compute the same thing share a cluster; balanced sampling."""
from __future__ import annotations

import math
from collections import Counter

import numpy as np
from kernelmill.app.cli import main
from kernelmill.curate.cluster import balanced_sample, cluster_records, default_k, sample_weights
from kernelmill.core.record import Record
from kernelmill.core.store import JsonlWriter, read_records
from fixtures.dedup_sources import BASE, UNRELATED

POOL = '''import torch
import torch.nn as nn

BATCH = {b}
CHANNELS = {c}
SIZE = {s}


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.MaxPool2d(kernel_size=2)

    def forward(self, x):
        return torch.relu(self.pool(x))


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, SIZE, SIZE)]


def get_init_inputs():
    return []
'''


def family(template: str, n: int, name: str) -> list[Record]:
    """``n`` resized members of a family; sizes enter as other module constants."""
    out = []
    for i in range(n):
        if "{b}" in template:
            source = template.format(b=8 + i, c=3 + i, s=32 * (i + 1))
        else:
            source = template.replace("BATCH = 16", f"BATCH = {16 + i}").replace(
                "M = 512", f"M = {512 + i}")
        out.append(Record.from_source(source, name=f"{name}{i}", category="other"))
    return out


def test_same_computation_shares_a_cluster_and_kinds_separate():
    records = family(BASE, 6, "conv") + family(UNRELATED, 6, "mm") + family(POOL, 6, "pool")
    clustered = cluster_records(records, k=3, seed=0)
    by_kind: dict[str, set[int]] = {}
    for r in clustered:
        by_kind.setdefault(r.name.rstrip("0123456789"), set()).add(r.cluster)
    assert all(len(ids) == 1 for ids in by_kind.values()), by_kind
    assert len({next(iter(ids)) for ids in by_kind.values()}) == 3


def test_cluster_file_is_deterministic_and_numbers_by_size(tmp_path, capsys):
    records = family(BASE, 7, "conv") + family(UNRELATED, 4, "mm") + family(POOL, 2, "pool")
    raw = tmp_path / "raw.jsonl"
    with JsonlWriter(raw) as writer:
        for r in records:
            writer.write(r)
    labels = []
    for run in range(2):
        out = tmp_path / f"c{run}.jsonl"
        assert main(["cluster", str(raw), "--out", str(out), "--k", "3", "--seed", "4"]) == 0
        labels.append({r.name: r.cluster for r in read_records(out)})
    assert labels[0] == labels[1]
    sizes = Counter(labels[0].values())
    assert [sizes[c] for c in sorted(sizes)] == sorted(sizes.values(), reverse=True)
    assert labels[0]["conv0"] == 0  # the largest cluster is cluster 0
    assert "3 clusters" in capsys.readouterr().out


def test_default_k_and_sampling_weights():
    assert default_k(1) == 1 and default_k(200) == 10 and default_k(100_000) == 50
    weights = sample_weights([0] * 10 + [1])
    assert math.isclose(weights[0], 1 / math.log(11)) and math.isclose(weights[-1], 1 / math.log(2))


def test_balanced_sample_favours_small_clusters_per_record():
    records = [Record(id=f"r{i:03d}", source="", name=f"r{i}", cluster=0 if i < 90 else 1 + i % 2)
               for i in range(100)]
    picks = Counter()
    for seed in range(40):
        chosen = balanced_sample(records, 20, seed=seed)
        assert len({r.id for r in chosen}) == 20
        picks.update(r.cluster for r in chosen)
    per_record = {c: picks[c] / (90 if c == 0 else 5) for c in picks}
    assert per_record[1] > per_record[0] and per_record[2] > per_record[0]
    assert balanced_sample(records, 20, seed=3) == balanced_sample(records, 20, seed=3)
    assert np.isclose(sum(sample_weights([r.cluster for r in records])), 90 / math.log(91)
                      + 10 / math.log(6))
