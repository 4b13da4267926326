"""Group-aware, stratified train/eval split with decontamination.

``kernelmill split IN --out DIR --eval-fraction F [--against BENCH ...] [--keep-contaminated]``

- **Families.** The unit of assignment is the family: the connected components of "shares a
  provenance root, an exact key, a structural key, a near-duplicate group or a behaviour key"
  (union-find over the records). A family goes to train or to eval whole, so a problem and its
  resized, renamed or re-epilogued relatives never straddle the split. Records without a
  ``dedup`` section are keyed here first (same algorithm as ``kernelmill dedup``).
- **Stratification.** Each family's stratum is its most common (category, difficulty tier) pair
  (``validation.difficulty.tier``, "unknown" when validation did not run). Strata are visited in a
  seeded order; in each, families are visited in a seeded order and a family goes to eval when
  that brings the eval count closer to the target ``F x (records seen so far)`` (the shortfall of
  one stratum carries to the next, so small strata still add up to about F overall).
  The same input and seed give the same split.
- **Decontamination.** Against ``--against`` (default ``builtin:kernelbench``, the shipped
  KernelBench fingerprints), contaminated problems (see ``splits.contamination``) are dropped before assignment, or with ``--keep-contaminated`` kept and marked in a
  ``contamination`` section. Either way they are listed in ``contamination.json`` / ``.md``.

Writes ``DIR/train.jsonl``, ``DIR/eval.jsonl``, ``DIR/contamination.json``,
``DIR/contamination.md`` and ``DIR/split.json`` (parameters and counts). The split is a global
decision, so the two record files are rewritten on each run rather than appended to.
"""
from __future__ import annotations

import json
import random
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kernelmill.curate.dedup import UnionFind, dedup_records, keys_for_sources
from kernelmill.core.errors import KernelmillError
from kernelmill.core.record import Contamination, Record
from kernelmill.core.stats import StageStats
from kernelmill.core.step import Step, option
from kernelmill.core.store import read_records, replace_jsonl

from .contamination import (
    DEFAULT_AGAINST,
    ContaminationIndex,
    fingerprint_chunk,
    load_benchmark,
    write_reports,
)

_DEDUP_FIELDS = ("exact_key", "structural_key", "near_group")


def difficulty_tier(record: Record) -> str:
    difficulty = record.validation.difficulty if record.validation else None
    tier = (difficulty or {}).get("tier")
    return str(tier) if tier is not None else "unknown"


def families(records: Sequence[Record]) -> list[int]:
    """Family root index per record: components over provenance root and the dedup keys."""
    uf = UnionFind(len(records))
    uf.union_by_label([r.family for r in records])
    for field in (*_DEDUP_FIELDS, "behaviour_key"):
        uf.union_by_label([(field, (r.dedup or {}).get(field)) if (r.dedup or {}).get(field)
                           else None for r in records])
    return uf.roots()


@dataclass
class Family:
    root: int
    members: list[int]
    name: str          # smallest member id: stable across runs and input orders
    stratum: tuple[str, str]


def build_families(records: Sequence[Record], roots: Sequence[int]) -> list[Family]:
    members: dict[int, list[int]] = {}
    for i, root in enumerate(roots):
        members.setdefault(root, []).append(i)
    out = []
    for root, idx in members.items():
        strata = Counter((records[i].category or "unknown", difficulty_tier(records[i]))
                         for i in idx)
        stratum = min(strata, key=lambda s: (-strata[s], s))
        out.append(Family(root, idx, min(records[i].id for i in idx), stratum))
    out.sort(key=lambda f: f.name)
    return out


def assign(families_: Sequence[Family], eval_fraction: float, seed: int) -> dict[str, str]:
    """family name -> "train" | "eval" (see the module docstring)."""
    rng = random.Random(seed)
    strata: dict[tuple[str, str], list[Family]] = {}
    for family in families_:
        strata.setdefault(family.stratum, []).append(family)
    order = sorted(strata)
    rng.shuffle(order)
    result: dict[str, str] = {}
    seen = in_eval = 0
    for stratum in order:
        group = sorted(strata[stratum], key=lambda f: f.name)
        rng.shuffle(group)
        seen += sum(len(f.members) for f in group)
        target = eval_fraction * seen - in_eval
        added = 0
        for family in group:
            size = len(family.members)
            if abs(added + size - target) < abs(added - target):
                result[family.name] = "eval"
                added += size
            else:
                result[family.name] = "train"
        in_eval += added
    return result


def _ensure_dedup(records: list[Record], threshold: float) -> list[Record]:
    if all(r.dedup and all(r.dedup.get(f) for f in _DEDUP_FIELDS) for r in records):
        return records
    return dedup_records(records, threshold=threshold, drop_exact=False)


def split_records(records: list[Record], *, eval_fraction: float = 0.2,
                  against: Sequence[str | Path] = (), seed: int = 0,
                  keep_contaminated: bool = False, threshold: float = 0.8,
                  stats: StageStats | None = None) -> tuple[list[Record], list[Record], dict]:
    """(train, eval, report data) for ``records``; sets ``split`` and ``split_group`` on each."""
    stats = stats or StageStats("split")
    if not 0.0 <= eval_fraction <= 1.0:
        raise KernelmillError(f"--eval-fraction must be in [0, 1], got {eval_fraction}")
    n_in = len(records)
    records = _ensure_dedup(records, threshold)
    if len(records) < n_in:
        stats.dropped("unparsable", n_in - len(records))

    for record in records:  # a previous split's marks are recomputed, never carried over
        record.contamination = None
        record.split_group = None
    benchmarks = [load_benchmark(spec) for spec in against]
    entries: list[dict] = []
    contaminated: set[str] = set()
    if benchmarks:
        index = ContaminationIndex(benchmarks, threshold)
        prints = keys_for_sources([r.source for r in records], description="fingerprinting",
                                  chunk_fn=fingerprint_chunk)
        for record, fp in zip(records, prints):
            matches = index.matches(fp) if fp is not None else []
            if not matches:
                continue
            action = "marked" if keep_contaminated else "dropped"
            entries.append({"id": record.id, "name": record.name, "category": record.category,
                            "action": action, "key": matches[0].key,
                            "matches": [m.to_dict() for m in matches]})
            contaminated.add(record.id)
            if keep_contaminated:
                record.contamination = Contamination(matches=[m.to_dict() for m in matches])
                stats.count("marked: contaminated")
        if not keep_contaminated:
            stats.dropped("contaminated", len(contaminated))
            records = [r for r in records if r.id not in contaminated]

    roots = families(records)
    fams = build_families(records, roots)
    sides = assign(fams, eval_fraction, seed)
    train: list[Record] = []
    evals: list[Record] = []
    for family in fams:
        side = sides[family.name]
        for i in family.members:
            record = records[i]
            record.split = side
            record.split_group = family.name
            (evals if side == "eval" else train).append(record)
    order = {r.id: i for i, r in enumerate(records)}
    train.sort(key=lambda r: order[r.id])
    evals.sort(key=lambda r: order[r.id])
    stats.count("families", len(fams))
    stats.count("in the largest family", max((len(f.members) for f in fams), default=0))
    stats.count("train", len(train))
    stats.count("eval", len(evals))
    report = {"benchmarks": benchmarks, "entries": entries,
              "policy": "mark" if keep_contaminated else "drop", "threshold": threshold,
              "checked": len(records) + (0 if keep_contaminated else len(contaminated))}
    return train, evals, report


def split_file(in_path: str | Path, out_dir: str | Path, *, eval_fraction: float = 0.2,
               against: Sequence[str | Path] = (), seed: int = 0, keep_contaminated: bool = False,
               threshold: float = 0.8) -> StageStats:
    """Write ``out_dir``/{train,eval}.jsonl and the contamination reports for ``in_path``."""
    start = time.perf_counter()
    stats = StageStats("split")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    records = list(read_records(in_path, allow_empty=False))
    train, evals, report = split_records(records, eval_fraction=eval_fraction, against=against,
                                         seed=seed, keep_contaminated=keep_contaminated,
                                         threshold=threshold, stats=stats)
    for name, part in (("train", train), ("eval", evals)):
        with replace_jsonl(out_dir / f"{name}.jsonl") as writer:
            for record in part:
                writer.write(record)
    stats.kept(len(train) + len(evals))
    write_reports(out_dir, benchmarks=report["benchmarks"], entries=report["entries"],
                  policy=report["policy"], threshold=threshold, checked=report["checked"])
    stats.seconds = time.perf_counter() - start
    summary = {"input": str(in_path), "eval_fraction": eval_fraction, "seed": seed,
               "threshold": threshold, "against": [str(a) for a in against],
               "keep_contaminated": keep_contaminated, "method": "families = connected "
               "components of provenance root, exact/structural key, near group, behaviour key; "
               "whole families assigned, stratified by category and difficulty tier",
               "stats": stats.to_dict()}
    (out_dir / "split.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return stats


@dataclass
class SplitConfig:
    """Knobs of the split stage."""

    eval_fraction: float = option(0.2, "share of problem families that go to eval", build="=")
    against: list[str] = option(
        help="reference benchmark to decontaminate against: folder of KernelBench files, records "
             "file, fingerprint file or builtin:NAME (shipped fingerprints; repeatable; given "
             "ones replace the default)", build="=", path=True,
        default_factory=lambda: list(DEFAULT_AGAINST))
    keep_contaminated: bool = option(False, "keep contaminated problems, marked, instead of "
                                     "dropping them", build="=")
    threshold: float = option(0.8, "near-duplicate Jaccard threshold of decontamination",
                              build="contamination_threshold")
    seed: int = option(0, "seed of the assignment", build="=")


def _run(inputs: list[Path], out: Path, config: SplitConfig) -> StageStats:
    return split_file(inputs[0], out, eval_fraction=config.eval_fraction,
                      against=tuple(config.against), seed=config.seed,
                      keep_contaminated=config.keep_contaminated, threshold=config.threshold)


STEP = Step(
    name="split", title="split", config=SplitConfig, run=_run,
    inputs=("curated.jsonl",), output="splits", out_help="output folder",
    input_help="records file (JSONL), ideally deduplicated and clustered",
    help="group-aware stratified train/eval split with decontamination",
    description="Assign whole families (provenance root + structural/near/behaviour groups) to "
                "train or eval, stratified by category and difficulty; drop (or mark) problems "
                "that match a reference benchmark. Writes OUT/train.jsonl, eval.jsonl, "
                "contamination.json and contamination.md.")
