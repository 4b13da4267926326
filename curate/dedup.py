"""Deduplication: four keys per record, exact duplicates dropped, the other groups marked.

``kernelmill dedup IN --out OUT [--threshold 0.8]`` writes every record once, with a ``dedup``
section ``{exact_key, structural_key, near_group, behaviour_key, ops}``:

- ``exact_key``: hash of the whole program with comments, docstrings, formatting and local names
  normalized (``curate.features``). Records sharing it are the same program; only the
  best-validated one is kept (``validation.passed`` first, then most checks passed, then the
  shortest, then the lexicographically first id), the others are counted as
  ``dropped: exact_duplicate``.
- ``structural_key``: hash of the forward arity and the op stream with every size, constant
  name and local name abstracted: the same computation at other shapes meets here.
- ``near_group``: MinHash (datasketch's ``affine32`` scheme, 128 permutations) over 5-token
  shingles of the near stream (boilerplate stripped), LSH banding with datasketch's optimal
  (bands, rows) for the threshold, every candidate pair verified by its estimated Jaccard, and
  connected components of the verified pairs. The group is named by its smallest member id.
- ``behaviour_key``: hash of ``validation.aten_ops`` and ``validation.probe_stats`` (floats
  rounded to 4 significant digits) when validation recorded them, else null.
- ``ops``: the abstracted op stream behind the structural key (clustering reads it).

Structural, near and behaviour groups are kept but marked: the split keeps each group on one side.
"""
from __future__ import annotations

import functools
import itertools
import json
import logging
import os
import time
import zlib
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kernelmill.core.errors import KernelmillError
from .features import extract, stream_hash
from kernelmill.core.progress import track
from kernelmill.core.record import Dedup, Record, Validation
from kernelmill.core.stats import StageStats
from kernelmill.core.step import Step, option
from kernelmill.validate.filter import keep_passed
from kernelmill.core.store import paused_gc, read_records, replace_jsonl

log = logging.getLogger("kernelmill")

NUM_PERM = 128
SHINGLE = 5
MINHASH_SEED = 1
_CHUNK = 500            # sources per worker task
_PARALLEL_FROM = 3000   # fewer records than this are keyed in-process


# --------------------------------------------------------------------------------------------
# union-find
# --------------------------------------------------------------------------------------------
class UnionFind:
    """Disjoint sets over 0..n-1 with path halving; ``groups()`` labels each by its root."""

    def __init__(self, n: int):
        self.parent = list(range(n))

    def find(self, x: int) -> int:
        parent = self.parent
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            if ra < rb:
                self.parent[rb] = ra
            else:
                self.parent[ra] = rb

    def union_by_label(self, labels: Sequence[Any]) -> None:
        """Join every pair of members whose label is equal (None joins nothing)."""
        first: dict[Any, int] = {}
        for i, label in enumerate(labels):
            if label is None:
                continue
            j = first.setdefault(label, i)
            if j != i:
                self.union(i, j)

    def roots(self) -> list[int]:
        return [self.find(i) for i in range(len(self.parent))]


# --------------------------------------------------------------------------------------------
# shingles and MinHash
# --------------------------------------------------------------------------------------------
_TOKEN_CACHE: dict[str, int] = {}
_MULTIPLIERS: dict[int, np.ndarray] = {}


def _multipliers(k: int) -> np.ndarray:
    mix = _MULTIPLIERS.get(k)
    if mix is None:
        rng = np.random.default_rng(0x5EED + k)
        mix = _MULTIPLIERS[k] = rng.integers(1, 2**63, size=k, dtype=np.uint64) | np.uint64(1)
    return mix


def token_hashes(tokens: Sequence[str]) -> np.ndarray:
    """Stable 32-bit hash per token (crc32; the same in every process and run)."""
    cache = _TOKEN_CACHE
    values = [cache.get(token) for token in tokens]
    if None in values:
        if len(cache) > 1_000_000:
            cache.clear()
        for i, token in enumerate(tokens):
            if values[i] is None:
                values[i] = cache[token] = zlib.crc32(token.encode("utf-8"))
    return np.array(values, dtype=np.uint64)


def shingle_hashes(hashes: np.ndarray, k: int = SHINGLE, pad: bool = True) -> np.ndarray:
    """32-bit hashes of the k-token windows of a token-hash array. A shorter array gives one
    padded window (``pad``) or none."""
    n = len(hashes)
    if n < k and not pad:
        return np.zeros(0, dtype=np.uint32)
    if n == 0:
        return np.zeros(1, dtype=np.uint32)
    if n < k:
        hashes = np.concatenate([hashes, np.zeros(k - n, dtype=np.uint64)])
        n = k
    width = n - k + 1
    mix = _multipliers(k)
    with np.errstate(over="ignore"):
        acc = hashes[:width] * mix[0]
        for j in range(1, k):
            acc = acc + hashes[j:j + width] * mix[j]
    return ((acc >> np.uint64(32)) ^ (acc & np.uint64(0xFFFFFFFF))).astype(np.uint32)


_PERMUTATIONS: tuple[np.ndarray, np.ndarray] | None = None


def permutations() -> tuple[np.ndarray, np.ndarray]:
    """datasketch's affine32 permutation parameters for (NUM_PERM, MINHASH_SEED)."""
    global _PERMUTATIONS
    if _PERMUTATIONS is None:
        from datasketch import MinHash

        a, b = MinHash(num_perm=NUM_PERM, seed=MINHASH_SEED, scheme="affine32").permutations
        _PERMUTATIONS = (np.asarray(a, dtype=np.uint32), np.asarray(b, dtype=np.uint32))
    return _PERMUTATIONS


def fmix32(hv: np.ndarray) -> np.ndarray:
    """MurmurHash3's 32-bit finalizer (a published bijection), which datasketch's ``affine32``
    scheme applies to each input hash before its permutations; element-wise on uint32, wrapping.
    ``tests/curate/test_dedup.py`` checks the signatures against datasketch's public MinHash."""
    hv = hv.astype(np.uint32, copy=True)
    with np.errstate(over="ignore"):
        hv ^= hv >> np.uint32(16)
        hv *= np.uint32(0x85EBCA6B)
        hv ^= hv >> np.uint32(13)
        hv *= np.uint32(0xC2B2AE35)
        hv ^= hv >> np.uint32(16)
    return hv


def minhash_signatures(shingle_sets: Sequence[np.ndarray], chunk: int = 100_000) -> np.ndarray:
    """(n, NUM_PERM) uint32 signatures, equal to datasketch's ``MinHash(scheme="affine32")``
    updated with the same 32-bit hash values, computed for many sets at once.

    Work goes in blocks of about ``chunk`` shingles, so memory stays near chunk x NUM_PERM x 4
    bytes whatever the number of sets."""
    n = len(shingle_sets)
    sig = np.empty((n, NUM_PERM), dtype=np.uint32)
    if n == 0:
        return sig
    a, b = permutations()
    lengths = np.fromiter((len(s) for s in shingle_sets), dtype=np.int64, count=n)
    if lengths.min() == 0:
        raise ValueError("every shingle set needs at least one shingle")
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    start = 0
    while start < n:
        stop = int(np.searchsorted(offsets, offsets[start] + chunk, side="right")) - 1
        stop = min(max(stop, start + 1), n)
        flat = np.concatenate(shingle_sets[start:stop]).astype(np.uint32, copy=False)
        with np.errstate(over="ignore"):  # (NUM_PERM, shingles): rows reduce contiguously
            permuted = a[:, None] * fmix32(flat)[None, :] + b[:, None]
        sig[start:stop] = np.minimum.reduceat(permuted, offsets[start:stop] - offsets[start],
                                              axis=1).T
        start = stop
    return sig


@functools.lru_cache(maxsize=16)
def lsh_params(threshold: float) -> tuple[int, int]:
    """(bands, rows) that datasketch's MinHashLSH picks for ``threshold`` at NUM_PERM."""
    from datasketch import MinHashLSH

    try:
        lsh = MinHashLSH(threshold=threshold, num_perm=NUM_PERM)
    except ValueError:  # thresholds near 1 want a single band; two long bands are closest
        return 2, NUM_PERM // 2
    return lsh.b, lsh.r


def estimated_jaccard(sig: np.ndarray, i: int, others: np.ndarray) -> np.ndarray:
    return np.count_nonzero(sig[others] == sig[i], axis=1) / sig.shape[1]


def _row_hash(block: np.ndarray) -> np.ndarray:
    """A 64-bit hash per row of a uint32 block (random odd multipliers, wrapping arithmetic)."""
    rng = np.random.default_rng(block.shape[1])
    weights = rng.integers(1, 2**63, size=block.shape[1], dtype=np.uint64) | np.uint64(1)
    with np.errstate(over="ignore"):
        h = block.astype(np.uint64) * weights
        return np.bitwise_xor.reduce(h ^ (h >> np.uint64(29)), axis=1) + h.sum(axis=1)


def near_components(sig: np.ndarray, threshold: float) -> list[int]:
    """Connected components of pairs with estimated Jaccard >= threshold; root index per row.

    Identical signatures are collapsed first; LSH banding then proposes candidate pairs among
    the distinct ones, and every proposal is verified on the full signature before joining.
    """
    n = len(sig)
    uf = UnionFind(n)
    if n < 2:
        return uf.roots()
    _, first, inverse = np.unique(_row_hash(sig), return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    for i in np.flatnonzero(first[inverse] != np.arange(n)):
        uf.union(int(i), int(first[inverse[i]]))
    distinct = np.sort(first)
    dsig = sig[distinct]
    bands, r = lsh_params(threshold)
    checked: set[tuple[int, int]] = set()
    for band in range(bands):
        keys = _row_hash(dsig[:, band * r:(band + 1) * r])
        _, bucket_of, counts = np.unique(keys, return_inverse=True, return_counts=True)
        bucket_of = bucket_of.reshape(-1)
        crowded = np.flatnonzero(counts[bucket_of] > 1)
        if len(crowded) == 0:
            continue
        order = crowded[np.argsort(bucket_of[crowded], kind="stable")]
        cuts = np.flatnonzero(np.diff(bucket_of[order])) + 1
        for members in np.split(order, cuts):
            _join_bucket(uf, dsig, distinct, members, threshold, checked)
    return uf.roots()


def _join_bucket(uf: UnionFind, dsig: np.ndarray, distinct: np.ndarray, members: np.ndarray,
                 threshold: float, tested: set[tuple[int, int]]) -> None:
    """Verify a bucket's candidates: pivots in turn, each against every member not yet joined.
    ``tested`` holds the pairs verified in earlier bands, which are not verified again."""
    find = uf.find
    if len({find(int(distinct[m])) for m in members}) == 1:
        return  # already one component (another band joined them)
    if len(members) == 2 and (int(members[0]), int(members[1])) in tested:
        return
    pending = members
    while len(pending) > 1:
        pivot, rest = int(pending[0]), pending[1:]
        similar = estimated_jaccard(dsig, pivot, rest) >= threshold
        for j in rest.tolist():
            tested.add((pivot, j))
        for j in rest[similar].tolist():
            uf.union(int(distinct[pivot]), int(distinct[j]))
        pending = rest[~similar]


# --------------------------------------------------------------------------------------------
# keys of one record
# --------------------------------------------------------------------------------------------
def _round_floats(value: Any) -> Any:
    if isinstance(value, float):
        return float(f"{value:.4g}")
    if isinstance(value, dict):
        return {str(k): _round_floats(v) for k, v in sorted(value.items())}
    if isinstance(value, (list, tuple)):
        return [_round_floats(v) for v in value]
    return value


def behaviour_key(validation: Validation | dict | None) -> str | None:
    """Fingerprint of the traced aten op sequence and probe output statistics, if recorded."""
    validation = Validation.from_dict(validation)
    if validation is None:
        return None
    aten, probe = validation.aten_ops, validation.probe_stats
    if not aten and not probe:
        return None
    text = json.dumps({"aten": list(aten or []), "probe": _round_floats(probe or {})},
                      sort_keys=True)
    return stream_hash([text])


@dataclass
class Keys:
    exact_key: str
    structural_key: str
    shingles: np.ndarray    # uint32 shingle hashes of the near stream
    ops: list[str]
    signature: np.ndarray | None = None  # MinHash of the shingles (set in bulk)


def record_keys(source: str) -> Keys:
    """Keys of one source; raises SyntaxError when it does not parse."""
    feats = extract(source)
    return Keys(exact_key=feats.exact_key, structural_key=feats.structural_key,
                shingles=shingle_hashes(token_hashes(feats.tokens)), ops=feats.ops)


def _keys_chunk(sources: list[str]) -> list[Keys | str]:
    """Keys of a chunk, signatures included (workers run this: the MinHash work is parallel)."""
    out: list[Keys | str] = []
    for source in sources:
        try:
            out.append(record_keys(source))
        except (SyntaxError, ValueError, RecursionError) as exc:
            out.append(f"{type(exc).__name__}: {exc}")
    good = [k for k in out if isinstance(k, Keys)]
    for k, sig in zip(good, minhash_signatures([k.shingles for k in good])):
        k.signature = sig
        k.shingles = _NO_SHINGLES  # the signature is all the caller needs: less to send back
    return out


_NO_SHINGLES = np.zeros(0, dtype=np.uint32)


def _chunked(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    it = iter(items)
    while chunk := list(itertools.islice(it, size)):
        yield chunk


def keys_for_sources(sources: Iterable[str], workers: int | None = None,
                     description: str = "keying", chunk_fn: Any = None) -> list[Any]:
    """Keys per source (an error string where a source does not parse), in parallel if large.

    ``sources`` may be a generator: with workers, each chunk goes to them as soon as it is
    read, so reading the rest overlaps their work. ``chunk_fn`` (a module-level function: list
    of sources -> list of results) replaces the key computation, so other stages can run their
    own per-source work the same way."""
    chunk_fn = chunk_fn or _keys_chunk
    if workers is None:
        workers = min(4, os.cpu_count() or 1)
    it = iter(sources)
    head = list(itertools.islice(it, _PARALLEL_FROM))
    results: list[Keys | str] = []
    if workers <= 1 or len(head) < _PARALLEL_FROM:
        chunks = list(_chunked(itertools.chain(head, it), _CHUNK))
        for chunk in track(chunks, len(chunks), description):
            results.extend(chunk_fn(chunk))
        return results
    import multiprocessing

    if chunk_fn is _keys_chunk:
        permutations()  # imports datasketch once here, not in every forked worker
    ctx = multiprocessing.get_context("fork" if os.name == "posix" else "spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        futures = [pool.submit(chunk_fn, chunk)
                   for chunk in _chunked(itertools.chain(head, it), _CHUNK)]
        for future in track(futures, len(futures), description):
            results.extend(future.result())
    return results


def near_groups_for(keys: Sequence[Keys], threshold: float) -> list[int]:
    """Root index of each key's near-duplicate component."""
    if not keys:
        return []
    sig = np.stack([k.signature if k.signature is not None else
                    minhash_signatures([k.shingles])[0] for k in keys])
    return near_components(sig, threshold)


def _validation_rank(record: Record) -> tuple:
    """Sort key: the best-validated record first (passed, most checks passed, short id)."""
    validation = record.validation or Validation()
    n_passed = sum(1 for c in validation.checks.values()
                   if isinstance(c, dict) and c.get("passed") is True)
    return (validation.passed is not True, -n_passed, len(record.id), record.id)


# --------------------------------------------------------------------------------------------
# the stage
# --------------------------------------------------------------------------------------------
def dedup_records(records: Sequence[Record], *, threshold: float = 0.8,
                  workers: int | None = None, stats: StageStats | None = None,
                  drop_exact: bool = True, timings: dict[str, float] | None = None,
                  keyed: Sequence[Keys | str] | None = None) -> list[Record]:
    """Key ``records`` (unless ``keyed`` holds their ``keys_for_sources`` results already) and
    return the survivors (input order) with their ``dedup`` section.

    ``timings``, when given, receives the seconds spent per phase."""
    stats = stats or StageStats("dedup")
    timings = timings if timings is not None else {}
    if not 0.0 < threshold <= 1.0:
        raise KernelmillError(f"--threshold must be in (0, 1], got {threshold}")
    if keyed is None:
        clock = time.perf_counter()
        keyed = keys_for_sources([r.source for r in records], workers)
        timings["parse + keys"] = time.perf_counter() - clock
    if len(keyed) != len(records):
        raise ValueError(f"{len(keyed)} keys for {len(records)} records")
    good: list[int] = []
    for i, result in enumerate(keyed):
        if isinstance(result, str):
            log.warning(f"record {records[i].id}: source does not parse ({result}); dropped")
            stats.dropped("unparsable")
        else:
            good.append(i)

    winners: dict[str, int] = {}
    for i in good:
        key = keyed[i].exact_key
        j = winners.get(key)
        if j is None or _validation_rank(records[i]) < _validation_rank(records[j]):
            winners[key] = i
    kept = sorted(winners.values()) if drop_exact else good
    if drop_exact:
        stats.dropped("exact_duplicate", len(good) - len(kept))

    kept_keys = [keyed[i] for i in kept]
    clock = time.perf_counter()
    roots = near_groups_for(kept_keys, threshold)
    timings["minhash + lsh"] = time.perf_counter() - clock
    group_name: dict[int, str] = {}
    for pos, root in enumerate(roots):
        rid = records[kept[pos]].id
        if root not in group_name or rid < group_name[root]:
            group_name[root] = rid

    out: list[Record] = []
    for pos, i in enumerate(kept):
        record, keys = records[i], keyed[i]
        record.dedup = Dedup.from_dict({
            "exact_key": keys.exact_key, "structural_key": keys.structural_key,
            "near_group": group_name[roots[pos]],
            "behaviour_key": behaviour_key(record.validation), "ops": keys.ops})
        out.append(record)
    _count_groups(stats, out)
    return out


def _count_groups(stats: StageStats, records: Iterable[Record]) -> None:
    records = list(records)
    for field in ("structural_key", "near_group", "behaviour_key"):
        sizes: dict[str, int] = {}
        for r in records:
            value = r.dedup.get(field)
            if value is not None:
                sizes[value] = sizes.get(value, 0) + 1
        label = field.replace("_key", "").replace("_group", "")
        stats.count(f"groups: {label}", sum(1 for v in sizes.values() if v > 1))
        stats.count(f"in a shared group: {label}", sum(v for v in sizes.values() if v > 1))


def dedup_file(in_path: str | Path, out_path: str | Path, *, threshold: float = 0.8,
               workers: int | None = None, timings: dict[str, float] | None = None,
               keep_failed: bool = True) -> StageStats:
    """Read ``in_path``, write the deduplicated records with their ``dedup`` section. Unless
    ``keep_failed``, problems that failed validation are dropped first (the filter step)."""
    with paused_gc():
        start = time.perf_counter()
        timings = timings if timings is not None else {}
        stats = StageStats("dedup")
        if not 0.0 < threshold <= 1.0:
            raise KernelmillError(f"--threshold must be in (0, 1], got {threshold}")
        rows = read_records(in_path, allow_empty=False)
        records: list[Record] = []

        def sources() -> Iterator[str]:  # the workers key what is read while the rest is read
            for record in keep_passed(rows, stats, keep_failed=keep_failed):
                records.append(record)
                yield record.source

        keyed = keys_for_sources(sources(), workers)
        timings["read + parse + keys"] = time.perf_counter() - start
        survivors = dedup_records(records, threshold=threshold, workers=workers, stats=stats,
                                  timings=timings, keyed=keyed)
        clock = time.perf_counter()
        with replace_jsonl(out_path) as writer:  # a rerun never keeps stale rows
            for record in survivors:
                if writer.write(record):
                    stats.kept()
                else:
                    stats.count("already present")
        timings["write"] = time.perf_counter() - clock
        stats.seconds = time.perf_counter() - start
    return stats


@dataclass
class DedupConfig:
    """Knobs of the dedup stage."""

    threshold: float = option(0.8, "MinHash Jaccard similarity at which two problems are near "
                              "duplicates", build="dedup_threshold")
    workers: int | None = option(None, "processes for parsing (default: up to 4, by core count)",
                                 result=False)
    keep_failed: bool = option(False, "keep problems that failed validation instead of dropping "
                               "them first (the filter step)")


def _run(inputs: list[Path], out: Path, config: DedupConfig) -> StageStats:
    return dedup_file(inputs[0], out, threshold=config.threshold, workers=config.workers,
                      keep_failed=config.keep_failed)


STEP = Step(
    name="dedup", title="dedup", config=DedupConfig, run=_run,
    inputs=("passed.jsonl",), output="deduped.jsonl",
    help="mark structural/near/behaviour duplicates, drop exact ones",
    description="Key every record (exact, structural, near MinHash-LSH, behaviour); drop exact "
                "duplicates keeping the best-validated one; mark the other groups.")
