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
warning), a records file (``.jsonl``), or a fingerprint file (``.json.gz``, below).

**Shipped fingerprints.** ``builtin:kernelbench`` (the default of ``--against``) names
``kernelmill/data/fingerprints/kernelbench.json.gz``: for every KernelBench level 1-4 problem its
exact and structural keys, its shingle and window hashes and its MinHash signature, and no
source. Any build checks against it without a benchmark checkout. Rebuild it (after a change to
``curate.features`` or the hashing, which a test catches through the file's canary) with::

    python scripts/build_fingerprints.py --build-fingerprints PATH/TO/KernelBench \
        --levels level1 level2 level3 level4 --name KernelBench \
        --source "ScalingIntelligence/KernelBench@COMMIT (MIT)" \
        --out data/fingerprints/kernelbench.json.gz

The file is gzip-compressed JSON written deterministically (same tree, same bytes); the reports
name it with its item count per level and its sha256.
"""
from __future__ import annotations

import argparse
import base64
import gzip
import hashlib
import io
import json
import logging
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Iterable

import numpy as np
from kernelmill.curate.dedup import (
    MINHASH_SEED,
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
    signature: np.ndarray | None = None  # MinHash of fp.shingles when precomputed (shipped)


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
    name: str = ""                                      # benchmark name (fingerprint files)
    source: str = ""                                    # where the fingerprinted tree came from
    sha256: str = ""                                    # of the fingerprint file
    kind: str = "sources"                               # sources | records | fingerprints

    def levels(self) -> dict[str, int]:
        return level_counts(item.item for item in self.items)

    def describe(self) -> dict[str, Any]:
        """What the reports say about this benchmark."""
        return {"spec": self.spec, "name": self.name or self.spec, "kind": self.kind,
                "source": self.source, "sha256": self.sha256, "items": len(self.items),
                "levels": self.levels(), "skipped": self.skipped}


def level_counts(items: Iterable[str]) -> dict[str, int]:
    """Items per level folder (``level1``: 100, ...); items outside one count as ``other``."""
    counts: dict[str, int] = {}
    for item in items:
        parts = Path(item).parts
        level = next((p for p in reversed(parts[:-1]) if p.startswith("level")), "other")
        counts[level] = counts.get(level, 0) + 1
    return dict(sorted(counts.items()))


BUILTIN = "builtin:"
FINGERPRINT_FORMAT = "kernelmill-benchmark-fingerprints/1"
FINGERPRINT_SUFFIX = ".json.gz"
DEFAULT_AGAINST = ("builtin:kernelbench",)
# Fingerprinted at build time and again at load time: a shipped file made by other feature or
# hashing code than this one no longer matches it, and loading it fails instead of missing copies.
CANARY = '''"""Canary: conv, norm and an epilogue."""
import torch
import torch.nn as nn
import torch.nn.functional as F

SIZE = 64


class Model(nn.Module):
    def __init__(self, c_in, c_out, k):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, k, padding=1, bias=False)
        self.norm = nn.GroupNorm(8, c_out)

    def forward(self, x, y):
        h = self.norm(self.conv(x)) @ y.transpose(-1, -2)
        for _ in range(2):
            h = torch.where(h > 0.5, F.gelu(h, approximate="tanh"), h * 0.1)
        return torch.logsumexp(h[:, 1:], dim=1, keepdim=True).mean()


def get_inputs():
    return [torch.randn(2, 3, SIZE, SIZE), torch.randn(2, 3, SIZE, SIZE)]


def get_init_inputs():
    return [3, 16, 3]
'''


def builtin_path(spec: str) -> Path:
    """The shipped fingerprint file that ``builtin:NAME`` names."""
    from kernelmill.data import DATA_DIR

    name = spec[len(BUILTIN):]
    path = DATA_DIR / "fingerprints" / f"{name}{FINGERPRINT_SUFFIX}"
    if not name or "/" in name or not path.is_file():
        shipped = sorted(p.name[:-len(FINGERPRINT_SUFFIX)]
                         for p in (DATA_DIR / "fingerprints").glob(f"*{FINGERPRINT_SUFFIX}"))
        raise KernelmillError(f"{spec}: no shipped benchmark fingerprints of that name "
                              f"(shipped: {', '.join(BUILTIN + n for n in shipped) or 'none'})")
    return path


def benchmark_path(spec: str | Path) -> Path:
    """The file or folder a ``--against`` value reads (``builtin:NAME``: the shipped file)."""
    spec = str(spec)
    return builtin_path(spec) if spec.startswith(BUILTIN) else Path(spec)


def _b64(array: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(array, dtype="<u4").tobytes()).decode("ascii")


def _unb64(text: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), dtype="<u4").astype(np.uint32)


def _canary() -> dict[str, Any]:
    fp = fingerprint(CANARY)
    sig = minhash_signatures([fp.shingles])[0]
    digest = hashlib.sha256()
    for part in (fp.exact_key, fp.structural_key, _b64(fp.shingles), _b64(fp.windows), _b64(sig)):
        digest.update(part.encode("ascii") + b"\0")
    return {"sha256": digest.hexdigest(), "num_perm": NUM_PERM, "shingle": SHINGLE,
            "ngram": NGRAM, "minhash_seed": MINHASH_SEED}


def write_fingerprints(bench: Benchmark, out: str | Path, *, name: str, source: str = "",
                       root: str | Path | None = None) -> dict[str, Any]:
    """Write ``bench``'s fingerprints (no source text) to ``out``; returns the header written.
    Item paths are stored relative to ``root`` (default: the benchmark folder)."""
    root = Path(root if root is not None else bench.spec)
    items = []
    sigs = minhash_signatures([item.fp.shingles for item in bench.items]) if bench.items else []
    for item, sig in zip(bench.items, sigs):
        path = Path(item.item)
        rel = path.relative_to(root).as_posix() if path.is_relative_to(root) else path.name
        items.append({"item": rel, "name": item.name, "exact_key": item.fp.exact_key,
                      "structural_key": item.fp.structural_key,
                      "shingles": _b64(item.fp.shingles), "windows": _b64(item.fp.windows),
                      "signature": _b64(sig)})
    skipped = [s.replace(str(root) + "/", "") for s in bench.skipped]
    header = {"format": FINGERPRINT_FORMAT, "name": name, "source": source,
              "levels": level_counts(i["item"] for i in items), "items": len(items), "skipped": skipped,
              "canary": _canary()}
    data = json.dumps({**header, "items": items}, sort_keys=True, separators=(",", ":"))
    buffer = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, mtime=0, compresslevel=9) as gz:
        gz.write(data.encode("utf-8"))
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_bytes(buffer.getvalue())
    return header


def load_fingerprints(path: str | Path, spec: str | None = None) -> Benchmark:
    """Read a fingerprint file written by ``write_fingerprints``; one-line error when it is not
    one, or when it was made by other feature or hashing code than this version's."""
    path = Path(path)
    raw = path.read_bytes()
    try:
        data = json.loads(gzip.decompress(raw))
        if data.get("format") != FINGERPRINT_FORMAT:
            raise ValueError(f"format {data.get('format')!r}, expected {FINGERPRINT_FORMAT!r}")
        bench = Benchmark(spec or str(path), name=str(data["name"]), source=str(data["source"]),
                          sha256=hashlib.sha256(raw).hexdigest(), kind="fingerprints",
                          skipped=list(data.get("skipped") or []))
        for item in data["items"]:
            fp = Fingerprint(exact_key=str(item["exact_key"]),
                             structural_key=str(item["structural_key"]),
                             shingles=_unb64(item["shingles"]), windows=_unb64(item["windows"]))
            sig = _unb64(item["signature"])
            if len(sig) != NUM_PERM or len(fp.shingles) == 0:
                raise ValueError(f"item {item['item']}: signature of {len(sig)} values or no "
                                 "shingles")
            bench.items.append(BenchItem(bench.spec, str(item["item"]), str(item["name"]), fp,
                                         signature=sig))
        canary = data["canary"]
    except (OSError, EOFError, ValueError, KeyError, TypeError) as exc:
        raise KernelmillError(f"{path}: not a benchmark fingerprint file ({exc})") from None
    if canary != _canary():
        raise KernelmillError(
            f"{path}: fingerprints made by other feature or hashing code than this kernelmill's; "
            "rebuild them: python scripts/build_fingerprints.py (see its --help)")
    return bench


def load_benchmark(spec: str | Path) -> Benchmark:
    """Read a benchmark: ``builtin:NAME`` or a fingerprint file (``.json.gz``), a folder or
    file of KernelBench problems, or a records file."""
    path = benchmark_path(spec)
    if not path.exists():
        raise KernelmillError(f"{spec}: no such benchmark file or folder")
    if path.is_file() and path.name.endswith(FINGERPRINT_SUFFIX):
        return load_fingerprints(path, str(spec))
    bench = Benchmark(str(spec))
    if path.is_file() and path.suffix in (".jsonl", ".json"):
        bench.kind = "records"

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
            missing = [i for i, item in enumerate(self.items) if item.signature is None]
            sigs = [item.signature for item in self.items]
            for i, sig in zip(missing, minhash_signatures([self.items[i].fp.shingles
                                                           for i in missing])):
                sigs[i] = sig
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


def _levels_text(levels: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in levels.items()) or "none"


def describe_benchmark(info: dict[str, Any]) -> str:
    """One phrase naming a benchmark of a contamination report: name, items per level, and the
    fingerprint file's hash or where the sources were read (``Benchmark.describe`` output)."""
    name = str(info.get("name") or info.get("spec") or "?")
    levels = info.get("levels") or {}
    if set(levels) <= {"other"}:  # no level folders: a flat folder or a records file
        levels = {}
    counts = _levels_text(levels) if levels else f"{info.get('items', '?')} items"
    total = f"{info.get('items')} problems: " if levels else ""
    where = _where(info)
    if where == f"read from {name}":
        return f"{name} ({total}{counts})"
    return f"{name} ({total}{counts}; {where})"


def _where(info: dict[str, Any]) -> str:
    if info.get("kind") == "fingerprints":
        where = f"fingerprints sha256 {str(info.get('sha256', ''))[:12]}"
        return where + (f" of {info['source']}" if info.get("source") else "")
    return f"read from {info.get('spec')}"


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
        "benchmarks": [b.describe() for b in benchmarks],
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
                  "| benchmark | items per level | skipped (malformed) | read from |",
                  "|---|---|---:|---|"]
        lines += [f"| {b.name or b.spec} | {_levels_text(b.levels())} | {len(b.skipped)} | "
                  f"{_where(b.describe())} (`{b.spec}`) |" for b in benchmarks]
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



def main(argv: list[str] | None = None) -> int:
    """``python scripts/build_fingerprints.py --build-fingerprints ROOT --out FILE``."""
    parser = argparse.ArgumentParser(
        prog="python scripts/build_fingerprints.py",
        description="Write a benchmark's fingerprint file (hashes and MinHash signatures, no "
                    "source) that --against builtin:NAME or --against FILE reads.")
    parser.add_argument("--build-fingerprints", metavar="ROOT", required=True, type=Path,
                        help="benchmark folder of KernelBench-format problems (level1/ ...)")
    parser.add_argument("--out", required=True, type=Path,
                        help=f"fingerprint file to write (*{FINGERPRINT_SUFFIX})")
    parser.add_argument("--name", help="benchmark name shown in reports (default: ROOT's name)")
    parser.add_argument("--source", default="", help="where ROOT came from (repository, commit, "
                        "license), shown in reports")
    parser.add_argument("--levels", nargs="+", metavar="DIR",
                        help="only these subfolders of ROOT (default: all of it)")
    args = parser.parse_args(argv)
    try:
        if not args.out.name.endswith(FINGERPRINT_SUFFIX):
            raise KernelmillError(f"--out must end with {FINGERPRINT_SUFFIX}")
        root = args.build_fingerprints
        parts = [root / level for level in args.levels] if args.levels else [root]
        bench = Benchmark(str(root))
        for part in parts:
            loaded = load_benchmark(part)
            bench.items += loaded.items
            bench.skipped += loaded.skipped
        if not bench.items:
            raise KernelmillError(f"{root}: no problem could be fingerprinted")
        header = write_fingerprints(bench, args.out, name=args.name or root.resolve().name,
                                    source=args.source, root=root)
    except KernelmillError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    digest = hashlib.sha256(args.out.read_bytes()).hexdigest()
    print(f"{args.out}: {header['items']} items ({_levels_text(header['levels'])}), "
          f"{len(header['skipped'])} skipped, {args.out.stat().st_size:,} bytes, sha256 {digest}")
    return 0

