"""The fast dedup path (streamed reading, forked workers, bulk numpy MinHash, banded LSH in
numpy) finds the same groups as a plain one built from datasketch's public per-item API."""
from __future__ import annotations

import numpy as np
from datasketch import MinHash, MinHashLSH
from fixtures.dedup_sources import BASE, REFORMATTED, RESIZED, SWAPPED, UNRELATED
from kernelmill.app.cli import main
from kernelmill.core.interop import problem_files, record_from_file
from kernelmill.core.record import Record
from kernelmill.core.store import JsonlWriter, read_records
from kernelmill.curate import dedup
from kernelmill.curate.dedup import NUM_PERM, MINHASH_SEED, UnionFind, dedup_file, lsh_params
from kernelmill.curate.features import extract

THRESHOLD = 0.8


def plain_groups(records: list[Record]) -> tuple[set, set, set]:
    """(exact groups, structural groups, near groups) as sets of frozensets of ids, computed one
    record at a time: datasketch MinHash per problem, MinHashLSH insert/query, verification by
    MinHash.jaccard, connected components."""
    feats = [extract(r.source) for r in records]
    hashes = [np.unique(dedup.shingle_hashes(dedup.token_hashes(f.tokens))) for f in feats]
    mins = []
    for h in hashes:
        m = MinHash(num_perm=NUM_PERM, seed=MINHASH_SEED, scheme="affine32", hashfunc=int)
        m.update_batch(h.tolist())
        mins.append(m)
    lsh = MinHashLSH(num_perm=NUM_PERM, params=lsh_params(THRESHOLD))
    for i, m in enumerate(mins):
        lsh.insert(i, m)
    uf = UnionFind(len(records))
    for i, m in enumerate(mins):
        for j in lsh.query(m):
            if j != i and m.jaccard(mins[j]) >= THRESHOLD:
                uf.union(i, j)

    def groups(labels) -> set:
        out: dict = {}
        for record, label in zip(records, labels):
            out.setdefault(label, set()).add(record.id)
        return {frozenset(g) for g in out.values() if len(g) > 1}

    return (groups(f.exact_key for f in feats), groups(f.structural_key for f in feats),
            groups(uf.roots()))


def test_fast_path_finds_the_plain_path_groups_on_seeds_synth_and_fixtures(tmp_path, seeds_dir,
                                                                          monkeypatch):
    synth = tmp_path / "synth.jsonl"
    assert main(["synth", "--seeds", str(seeds_dir), "--n", "60", "--seed", "3",
                 "--out", str(synth)]) == 0
    records = [record_from_file(p) for p in problem_files(seeds_dir)]
    records += list(read_records(synth))
    records += [Record.from_source(s, name=n, category="fused", level=2) for n, s in
                (("base", BASE), ("reformatted", REFORMATTED), ("resized", RESIZED),
                 ("swapped", SWAPPED), ("unrelated", UNRELATED))]
    assert len(records) > 150
    exact, structural, near = plain_groups(records)
    assert exact and structural and near  # the data has every kind of group to find

    raw = tmp_path / "raw.jsonl"
    with JsonlWriter(raw) as writer:
        for r in records:
            writer.write(r)
    monkeypatch.setattr(dedup, "_PARALLEL_FROM", 20)  # the pool, streamed, in small chunks
    monkeypatch.setattr(dedup, "_CHUNK", 16)
    timings: dict = {}
    dedup_file(raw, tmp_path / "out.jsonl", threshold=THRESHOLD, workers=2, timings=timings)
    assert "read + parse + keys" in timings
    kept = list(read_records(tmp_path / "out.jsonl"))
    kept_ids = {r.id for r in kept}

    # one survivor per exact group, the others dropped
    for group in exact:
        assert len(group & kept_ids) == 1
    assert len(kept) == len(records) - sum(len(g) - 1 for g in exact)

    def fast_groups(field: str) -> set:
        out: dict = {}
        for r in kept:
            out.setdefault(r.dedup[field], set()).add(r.id)
        return {frozenset(g) for g in out.values() if len(g) > 1}

    def restricted(groups: set) -> set:  # the plain groups among the survivors
        return {frozenset(g & kept_ids) for g in groups if len(g & kept_ids) > 1}

    assert fast_groups("structural_key") == restricted(structural)
    assert fast_groups("near_group") == plain_groups(kept)[2]
