"""Decontamination against reference benchmarks, and the reports that prove it.

A problem is contaminated by a benchmark item when any of these hold (first the cheap ones):

- ``exact``: same exact key (same program up to comments, layout and local names);
- ``structural``: same structural key (same op stream with sizes and names abstracted: the
  benchmark problem at other shapes);
- ``near``: Jaccard similarity of the 5-token shingle sets of the near streams >= threshold
  (candidates from datasketch ``MinHashLSH``, score = the exact Jaccard of the two sets);
- ``ngram``: the two near streams share a window of ``NGRAM`` = 48 consecutive tokens (score =
  the share of the problem's 48-token windows found in the item). The near stream has
  boilerplate stripped and names and numbers abstracted, so a renamed or resized copy of a
  benchmark problem pasted into a larger one still shares its windows. 48 tokens is about six
  statements; across the 84 shipped seed problems the longest window two different problems
  share is 35 tokens (two normalization layers written out), so shared scaffolding such as
  ``self.conv = nn.Conv2d(...)`` followed by one activation does not reach it.

A benchmark is a folder (or file) of KernelBench-format problems, read with
``curate.interop.problem_files`` / ``record_from_file`` (malformed files are skipped with a
warning), or a records file (``.jsonl``).
"""
from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from kernelmill.curate.dedup import (
    NUM_PERM,
    SHINGLE,
    lsh_params,
    minhash_signatures,
    shingle_hashes,
    token_hashes,
)
from kernelmill.core.errors import KernelmillError, ProblemError
from kernelmill.curate.features import extract
from kernelmill.core.interop import problem_files, record_from_file
from kernelmill.core.record import Record
from kernelmill.core.store import read_records

log = logging.getLogger("kernelmill")

NGRAM = 48


@dataclass
class Fingerprint:
    """What the contamination check compares, for one problem source."""

    exact_key: str
    structural_key: str
    shingles: np.ndarray   # unique 5-token shingle hashes of the near stream
    windows: np.ndarray    # unique NGRAM-token window hashes of the near stream (maybe empty)


def fingerprint(source: str) -> Fingerprint:
    feats = extract(source)
    hashes = token_hashes(feats.tokens)
    return Fingerprint(exact_key=feats.exact_key, structural_key=feats.structural_key,
                       shingles=np.unique(shingle_hashes(hashes, SHINGLE)),
                       windows=np.unique(shingle_hashes(hashes, NGRAM, pad=False)))


def fingerprint_chunk(sources: list[str]) -> list[Fingerprint | None]:
    """Fingerprints of a chunk of sources (None where one does not parse)."""
    out: list[Fingerprint | None] = []
    for source in sources:
        try:
            out.append(fingerprint(source))
        except (SyntaxError, ValueError, RecursionError):
            out.append(None)
    return out


@dataclass
class BenchItem:
    benchmark: str   # the --against argument it came from
    item: str        # file path, or record id for a records file
    name: str
    fp: Fingerprint


@dataclass
class Match:
    benchmark: str
    item: str
    item_name: str
    key: str         # exact | structural | near | ngram
    score: float

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["score"] = round(self.score, 4)
        return data


@dataclass
class Benchmark:
    spec: str
    items: list[BenchItem] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # "file:line: reason"


def load_benchmark(spec: str | Path) -> Benchmark:
    """Read a benchmark folder/file of KernelBench problems, or a records file."""
    path = Path(spec)
    bench = Benchmark(str(spec))
    if not path.exists():
        raise KernelmillError(f"{spec}: no such benchmark file or folder")
    if path.is_file() and path.suffix in (".jsonl", ".json"):
        def note(message: str) -> None:
            bench.skipped.append(message)
            log.warning(message)
        records: list[tuple[str, Record]] = [(r.id, r) for r in read_records(path, note)]
    else:
        records = []
        for file in problem_files(path):
            try:
                records.append((str(file), record_from_file(file, generator="benchmark")))
            except ProblemError as exc:
                bench.skipped.append(str(exc))
                log.warning(f"benchmark {spec}: skipped malformed {exc}")
    for item, record in records:
        try:
            fp = fingerprint(record.source)
        except (SyntaxError, ValueError, RecursionError) as exc:
            bench.skipped.append(f"{item}: {type(exc).__name__}: {exc}")
            log.warning(f"benchmark {spec}: skipped {item} ({exc})")
            continue
        bench.items.append(BenchItem(str(spec), item, record.name, fp))
    return bench


class ContaminationIndex:
    """Everything the benchmarks hold, indexed for the four checks."""

    def __init__(self, benchmarks: list[Benchmark], threshold: float = 0.8):
        from datasketch import LeanMinHash, MinHashLSH

        self.threshold = threshold
        self.benchmarks = benchmarks
        self.items = [item for bench in benchmarks for item in bench.items]
        self.exact: dict[str, list[int]] = {}
        self.structural: dict[str, list[int]] = {}
        self.windows: dict[int, list[int]] = {}
        for i, item in enumerate(self.items):
            self.exact.setdefault(item.fp.exact_key, []).append(i)
            self.structural.setdefault(item.fp.structural_key, []).append(i)
            for w in item.fp.windows.tolist():
                self.windows.setdefault(w, []).append(i)
        self._window_keys = np.fromiter(self.windows, dtype=np.uint32, count=len(self.windows))
        self.lsh = MinHashLSH(num_perm=NUM_PERM, params=lsh_params(threshold))
        self._lean = LeanMinHash
        if self.items:
            sigs = minhash_signatures([item.fp.shingles for item in self.items])
            for i, sig in enumerate(sigs):
                self.lsh.insert(i, LeanMinHash(seed=1, hashvalues=sig, scheme="affine32"))

    def __len__(self) -> int:
        return len(self.items)

    def matches(self, fp: Fingerprint, signature: np.ndarray | None = None) -> list[Match]:
        """Every benchmark item ``fp`` matches, strongest key per item."""
        if not self.items:
            return []
        found: dict[int, Match] = {}

        def add(i: int, key: str, score: float) -> None:
            if i not in found:
                item = self.items[i]
                found[i] = Match(item.benchmark, item.item, item.name, key, score)

        for i in self.exact.get(fp.exact_key, ()):
            add(i, "exact", 1.0)
        for i in self.structural.get(fp.structural_key, ()):
            add(i, "structural", 1.0)
        if signature is None:
            signature = minhash_signatures([fp.shingles])[0]
        for i in self.lsh.query(self._lean(seed=1, hashvalues=signature, scheme="affine32")):
            if i in found:
                continue
            other = self.items[i].fp.shingles
            inter = len(np.intersect1d(fp.shingles, other, assume_unique=True))
            jaccard = inter / (len(fp.shingles) + len(other) - inter)
            if jaccard >= self.threshold:
                add(i, "near", jaccard)
        if len(fp.windows) and len(self._window_keys):
            shared = fp.windows[np.isin(fp.windows, self._window_keys)]
            counts: dict[int, int] = {}
            for w in shared.tolist():
                for i in self.windows[w]:
                    counts[i] = counts.get(i, 0) + 1
            for i, n in counts.items():
                add(i, "ngram", n / len(fp.windows))
        return sorted(found.values(), key=lambda m: (-m.score, m.key, m.item))


def write_reports(out_dir: Path, *, benchmarks: list[Benchmark], entries: list[dict[str, Any]],
                  policy: str, threshold: float, checked: int) -> None:
    """contamination.json (machine-readable) and contamination.md (for people)."""
    by_key: dict[str, int] = {}
    for entry in entries:
        for match in entry["matches"]:
            by_key[match["key"]] = by_key.get(match["key"], 0) + 1
    report = {
        "policy": policy,
        "checks": {"exact": "exact key", "structural": "structural key",
                   "near": f"Jaccard of {SHINGLE}-token shingles >= {threshold}",
                   "ngram": f"a shared window of {NGRAM} tokens"},
        "threshold": threshold,
        "ngram": NGRAM,
        "checked": checked,
        "against": [b.spec for b in benchmarks],
        "benchmarks": [{"spec": b.spec, "items": len(b.items), "skipped": b.skipped}
                       for b in benchmarks],
        "contaminated": len(entries),
        "matches_by_key": dict(sorted(by_key.items())),
        "problems": entries,
    }
    (out_dir / "contamination.json").write_text(json.dumps(report, indent=2) + "\n",
                                                encoding="utf-8")
    lines = ["# Contamination report", ""]
    if not benchmarks:
        lines += ["No reference benchmark was given (`--against`), so nothing was checked.", ""]
    else:
        action = "dropped from both splits" if policy == "drop" else "kept and marked"
        lines += [(f"{checked} problems were checked against {len(benchmarks)} benchmark(s); "
                  f"{len(entries)} matched and were {action}."), "",
                  "| benchmark | items | skipped (malformed) |", "|---|---:|---:|"]
        lines += [f"| `{b.spec}` | {len(b.items)} | {len(b.skipped)} |" for b in benchmarks]
        lines += ["", ("A problem matches a benchmark item on the **exact** key (same program up to "
                  "comments, layout and names), the **structural** key (same op stream at other "
                  f"sizes), **near** (Jaccard of {SHINGLE}-token shingles >= {threshold}) or "
                  f"**ngram** (a shared {NGRAM}-token window of the normalized stream)."), ""]
        if by_key:
            lines += ["| key | matches |", "|---|---:|"]
            lines += [f"| {k} | {v} |" for k, v in sorted(by_key.items())]
            lines.append("")
    if entries:
        lines += ["| problem | name | action | benchmark item | key | score |",
                  "|---|---|---|---|---|---:|"]
        for entry in entries:
            for match in entry["matches"]:
                lines.append(f"| `{entry['id']}` | {entry['name']} | {entry['action']} | "
                             f"`{match['item']}` ({match['item_name']}) | {match['key']} | "
                             f"{match['score']:.3f} |")
        lines.append("")
    (out_dir / "contamination.md").write_text("\n".join(lines), encoding="utf-8")

