"""Clustering: group problems by what they compute, so sampling can balance the kinds.

``kernelmill cluster IN --out OUT [--k K] [--seed S]`` sets ``cluster`` (an int) on every record.

Features per record:
- TF-IDF of op 1- to 3-grams of the abstracted op stream (``dedup.ops`` when dedup ran, else
  extracted from the source with ``curate.features``), sublinear tf, rows L2-normalized;
- numeric descriptors, standardized and scaled to weigh about as much as a third of the op block:
  log flops, log bytes (from ``validation`` when present, else 0), log op count, difficulty score.

scikit-learn ``MiniBatchKMeans`` (k = ``--k``, default ``min(50, round(sqrt(n / 2)))``, at least 1;
``random_state`` = seed). Cluster ids are renumbered by size, largest first, so id 0 is the
largest cluster and the ids are the same for the same input and seed.

``sample_weights`` / ``balanced_sample`` weight each record by ``1 / log(n_c + 1)`` where ``n_c``
is the size of its cluster, which flattens the share of large clusters without starving them.
"""
from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kernelmill.core.errors import KernelmillError
from .features import extract
from kernelmill.core.record import Record, Validation
from kernelmill.core.stats import StageStats
from kernelmill.core.step import Step, option
from kernelmill.core.store import paused_gc, read_records, replace_jsonl

DEFAULT_MAX_K = 50
_DESCRIPTOR_WEIGHT = 0.35


def default_k(n: int) -> int:
    return max(1, min(DEFAULT_MAX_K, round(math.sqrt(n / 2))))


def op_stream(record: Record) -> list[str] | None:
    """The abstracted op stream of a record (None when its source does not parse)."""
    ops = (record.dedup or {}).get("ops")
    if ops is not None:
        return list(ops)
    try:
        return extract(record.source).ops
    except (SyntaxError, ValueError, RecursionError):
        return None


def _descriptors(records: Sequence[Record], streams: Sequence[list[str]]) -> np.ndarray:
    rows = []
    for record, ops in zip(records, streams):
        v = record.validation or Validation()
        score = (v.difficulty or {}).get("score")
        rows.append((math.log1p(float(v.flops or 0.0)),
                     math.log1p(float(v.bytes or 0.0)),
                     math.log1p(len(ops)),
                     float(score or 0.0)))
    x = np.asarray(rows, dtype=np.float64)
    std = x.std(axis=0)
    std[std == 0] = 1.0
    x = (x - x.mean(axis=0)) / std
    return x * (_DESCRIPTOR_WEIGHT / math.sqrt(x.shape[1]))


def op_ngram_counts(streams: Sequence[list[str]], max_n: int = 3, min_df: int = 1):
    """Sparse counts of op 1..max_n-grams per stream (columns: n-grams seen in >= min_df)."""
    from scipy import sparse

    vocab: dict = {}
    indices: list[int] = []
    indptr = [0]
    for ops in streams:
        grams: list = list(ops) or ["<none>"]
        for n in range(2, max_n + 1):
            grams += zip(*(ops[i:] for i in range(n)))
        indices += [vocab.setdefault(g, len(vocab)) for g in grams]
        indptr.append(len(indices))
    counts = sparse.csr_matrix((np.ones(len(indices), dtype=np.float32), indices, indptr),
                               shape=(len(streams), len(vocab)))
    counts.sum_duplicates()
    if min_df > 1:
        df = np.bincount(counts.indices, minlength=counts.shape[1])
        keep = np.flatnonzero(df >= min_df)
        if len(keep):
            counts = counts[:, keep]
    return counts


def feature_matrix(records: Sequence[Record], streams: Sequence[list[str]]):
    """Sparse [TF-IDF of op n-grams | scaled numeric descriptors] matrix, one row per record."""
    from scipy import sparse
    from sklearn.feature_extraction.text import TfidfTransformer

    counts = op_ngram_counts(streams, 3, min_df=2 if len(streams) >= 1000 else 1)
    tfidf = TfidfTransformer(sublinear_tf=True).fit_transform(counts).astype(np.float32)
    numeric = sparse.csr_matrix(_descriptors(records, streams).astype(np.float32))
    return sparse.hstack([tfidf, numeric], format="csr")


def cluster_records(records: Sequence[Record], *, k: int | None = None, seed: int = 0,
                    stats: StageStats | None = None, timings: dict[str, float] | None = None
                    ) -> list[Record]:
    """Set ``cluster`` on each record that parses; returns those records (input order)."""
    from sklearn.cluster import MiniBatchKMeans
    from threadpoolctl import threadpool_limits

    stats = stats or StageStats("cluster")
    timings = timings if timings is not None else {}
    usable, streams = [], []
    for record in records:
        ops = op_stream(record)
        if ops is None:
            stats.dropped("unparsable")
            continue
        usable.append(record)
        streams.append(ops)
    if not usable:
        return []
    if k is not None and k < 1:
        raise KernelmillError(f"--k must be at least 1, got {k}")
    n_clusters = min(k or default_k(len(usable)), len(usable))
    if n_clusters == 1:
        labels = np.zeros(len(usable), dtype=np.int64)
    else:
        clock = time.perf_counter()
        x = feature_matrix(usable, streams)
        timings["features"] = time.perf_counter() - clock
        clock = time.perf_counter()
        model = MiniBatchKMeans(n_clusters=n_clusters, random_state=seed, n_init=1,
                                batch_size=4096, max_iter=100, reassignment_ratio=0.01)
        # One BLAS/OpenMP thread: on 2 cores shared with other work, two spinning threads made
        # k-means of 100k problems 4-9 s instead of 1-1.7 s (measured, load 3.6).
        with threadpool_limits(1):
            labels = model.fit_predict(x)
        timings["kmeans"] = time.perf_counter() - clock
    sizes = Counter(labels.tolist())
    order = sorted(sizes, key=lambda c: (-sizes[c], c))
    renumber = {old: new for new, old in enumerate(order)}
    for record, label in zip(usable, labels.tolist()):
        record.cluster = renumber[label]
    stats.count("clusters", len(sizes))
    return usable


def cluster_file(in_path: str | Path, out_path: str | Path, *, k: int | None = None,
                 seed: int = 0, timings: dict[str, float] | None = None) -> StageStats:
    """Read ``in_path``, write every record with its ``cluster`` id to ``out_path``."""
    with paused_gc():
        start = time.perf_counter()
        timings = timings if timings is not None else {}
        stats = StageStats("cluster")
        records = list(read_records(in_path, allow_empty=False))
        timings["read"] = time.perf_counter() - start
        clustered = cluster_records(records, k=k, seed=seed, stats=stats, timings=timings)
        clock = time.perf_counter()
        with replace_jsonl(out_path) as writer:  # a rerun never keeps stale rows
            for record in clustered:
                if writer.write(record):
                    stats.kept()
                else:
                    stats.count("already present")
        timings["write"] = time.perf_counter() - clock
        stats.seconds = time.perf_counter() - start
    return stats


def sample_weights(clusters: Sequence[int | None]) -> np.ndarray:
    """Weight ``1 / log(n_c + 1)`` per record, n_c = size of its cluster (None: its own)."""
    sizes = Counter(c for c in clusters if c is not None)
    return np.array([1.0 / math.log((sizes[c] if c is not None else 1) + 1) for c in clusters])


def balanced_sample(records: Sequence[Record], n: int, *, seed: int = 0) -> list[Record]:
    """``n`` records without replacement, drawn with ``sample_weights`` (input order kept)."""
    if n >= len(records):
        return list(records)
    weights = sample_weights([r.cluster for r in records])
    rng = np.random.default_rng(seed)
    chosen = rng.choice(len(records), size=n, replace=False, p=weights / weights.sum())
    return [records[i] for i in sorted(chosen.tolist())]


@dataclass
class ClusterConfig:
    """Knobs of the clustering stage."""

    k: int | None = option(None, f"number of clusters (default min({DEFAULT_MAX_K}, sqrt(n/2)))")
    seed: int = option(0, "random state for k-means", build="=")


def _run(inputs: list[Path], out: Path, config: ClusterConfig) -> StageStats:
    return cluster_file(inputs[0], out, k=config.k, seed=config.seed)


STEP = Step(
    name="cluster", title="cluster", config=ClusterConfig, run=_run,
    inputs=("deduped.jsonl",), output="curated.jsonl",
    build_values=lambda build: {"k": build.config.clusters or None},
    help="cluster problems by op n-grams and size descriptors",
    description="TF-IDF of op n-grams plus numeric descriptors, MiniBatchKMeans; writes a "
                "cluster id per record (0 = largest cluster).")
