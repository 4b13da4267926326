"""Publish a split folder as a Hugging Face dataset: parquet per split and a dataset card.

``kernelmill publish DIR --out DATASET [--push-to-hub REPO_ID] [--token T]``

``DATASET/data/{split}-00000-of-00001.parquet`` holds one flat row per problem (``COLUMNS``);
``DATASET/README.md`` is the card: YAML (``configs``, ``dataset_info`` features and splits,
license, task categories, size category) and prose made from the records themselves (how the
problems were made, the checks applied, the hardware and versions validation ran on, the split
method, the contamination results, counts per category and difficulty, how to grade). The
``reference`` column holds the problem source and ``problem_id`` its id: the grader's TRL reward
function reads those two columns. ``datasets.load_dataset(DATASET)`` loads it offline.
"""
from __future__ import annotations

import ast
import json
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kernelmill.core.errors import KernelmillError
from kernelmill.core.problem import parse_metadata
from kernelmill.core.record import Record
from kernelmill.core.stats import StageStats
from kernelmill.core.store import read_records

SPLITS = ("train", "eval")
LICENSE = "apache-2.0"

# (column, datasets dtype, description)
COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("problem_id", "string", "stable id: hash of the canonical problem source"),
    ("name", "string", "problem name"),
    ("description", "string", "one-line description from the problem docstring"),
    ("category", "string", "kind of computation (elementwise, matmul, convolution, ...)"),
    ("level", "int32", "KernelBench-style level (1 single op, 2 fused, 3 block)"),
    ("reference", "string", "the PyTorch reference program (Model, get_inputs, get_init_inputs)"),
    ("difficulty", "string", "difficulty tier from validation ('unknown' if not validated)"),
    ("difficulty_score", "float64", "difficulty score from validation"),
    ("validated", "bool", "every validation check passed"),
    ("device", "string", "device validation ran on"),
    ("dtype", "string", "input dtype used for validation"),
    ("eager_ms", "float64", "eager PyTorch time (ms) at the validated size"),
    ("inductor_ms", "float64", "torch.compile (Inductor) time (ms)"),
    ("inductor_speedup", "float64", "eager_ms / inductor_ms"),
    ("flops", "float64", "floating-point operations of one forward"),
    ("bytes", "float64", "bytes moved by one forward (lower bound)"),
    ("roofline_ms", "float64", "roofline time bound (ms)"),
    ("atol", "float64", "calibrated absolute tolerance for grading"),
    ("rtol", "float64", "calibrated relative tolerance for grading"),
    ("family", "string", "split family: problems sharing it are all in one split"),
    ("cluster", "int32", "cluster id (0 = largest)"),
    ("structural_key", "string", "hash of the size-abstracted op stream"),
    ("near_group", "string", "near-duplicate group (representative problem id)"),
    ("contamination", "string", "JSON of benchmark matches when kept and marked, else null"),
    ("provenance", "string", "JSON: seed, generator, operations, parent"),
    ("validation", "string", "JSON: the full validation section"),
)


def _float(value: Any) -> float | None:
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None


def _description(source: str) -> str:
    try:
        return parse_metadata(ast.get_docstring(ast.parse(source)))[0]
    except SyntaxError:
        return ""


def row(record: Record) -> dict[str, Any]:
    """The flat dataset row of a record."""
    v = record.validation or {}
    difficulty = v.get("difficulty") if isinstance(v.get("difficulty"), dict) else {}
    dedup = record.dedup or {}
    contamination = record.extra.get("contamination")
    return {
        "problem_id": record.id,
        "name": record.name,
        "description": _description(record.source),
        "category": record.category,
        "level": int(record.level or 1),
        "reference": record.source,
        "difficulty": str(difficulty.get("tier") or "unknown"),
        "difficulty_score": _float(difficulty.get("score")),
        "validated": v.get("passed") if isinstance(v.get("passed"), bool) else None,
        "device": v.get("device"),
        "dtype": v.get("dtype"),
        **{k: _float(v.get(k)) for k in ("eager_ms", "inductor_ms", "inductor_speedup", "flops",
                                         "bytes", "roofline_ms", "atol", "rtol")},
        "family": record.extra.get("split_group") or record.family,
        "cluster": record.cluster,
        "structural_key": dedup.get("structural_key"),
        "near_group": dedup.get("near_group"),
        "contamination": json.dumps(contamination, sort_keys=True) if contamination else None,
        "provenance": json.dumps(record.provenance, sort_keys=True),
        "validation": json.dumps(record.validation, sort_keys=True) if record.validation else None,
    }


def _arrow_schema():
    import pyarrow as pa

    types = {"string": pa.string(), "int32": pa.int32(), "float64": pa.float64(),
             "bool": pa.bool_()}
    return pa.schema([(name, types[dtype]) for name, dtype, _ in COLUMNS])


def write_parquet(records: Sequence[Record], path: Path) -> int:
    """Write the rows; returns the in-memory size of the table in bytes (the card states it)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [row(r) for r in records]
    table = pa.Table.from_pylist(rows, schema=_arrow_schema())
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return int(table.nbytes)


def _size_category(n: int) -> str:
    for limit, label in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"),
                         (1_000_000, "100K<n<1M")):
        if n < limit:
            return label
    return "1M<n<10M"


def card_yaml(counts: dict[str, int], pretty_name: str, nbytes: dict[str, int]) -> str:
    import yaml

    meta = {
        "license": LICENSE,
        "pretty_name": pretty_name,
        "task_categories": ["text-generation"],
        "tags": ["code", "gpu-kernels", "pytorch", "triton", "cuda", "kernelbench"],
        "size_categories": [_size_category(sum(counts.values()))],
        "configs": [{"config_name": "default",
                     "data_files": [{"split": s, "path": f"data/{s}-*"} for s in counts]}],
        "dataset_info": {
            "features": [{"name": name, "dtype": dtype} for name, dtype, _ in COLUMNS],
            "splits": [{"name": s, "num_bytes": nbytes[s], "num_examples": n}
                       for s, n in counts.items()],
            "dataset_size": sum(nbytes.values()),
        },
    }
    return "---\n" + yaml.safe_dump(meta, sort_keys=False) + "---\n"


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return lines + [""]


def card_prose(parts: dict[str, list[Record]], split_dir: Path, pretty_name: str) -> str:
    records = [r for part in parts.values() for r in part]
    n = len(records)
    lines = [f"# {pretty_name}", "",
             (f"{n} GPU-kernel problems in KernelBench format: each is a PyTorch reference program "
             "(`Model`, `get_inputs()`, `get_init_inputs()`) that a model should rewrite as a "
             "faster kernel (`ModelNew`). Made with `kernelmill`."), ""]

    lines += ["## How the problems were made", ""]
    generators = Counter((r.provenance or {}).get("generator") or "seed" for r in records)
    lines += _table(("generator", "problems"), sorted(generators.items(), key=lambda kv: -kv[1]))
    lines += [("Each problem's `provenance` column (JSON) names its generator, the seed problem "
              "it descends from, the operations applied and its parent."), ""]

    lines += ["## Checks applied", ""]
    checks: dict[str, Counter] = {}
    for r in records:
        for name, check in ((r.validation or {}).get("checks") or {}).items():
            if isinstance(check, dict):
                state = {True: "passed", False: "failed", None: "skipped"}.get(check.get("passed"),
                                                                              "skipped")
                checks.setdefault(name, Counter())[state] += 1
    if checks:
        lines += _table(("check", "passed", "failed", "skipped"),
                        [(f"`{k}`", c["passed"], c["failed"], c["skipped"])
                         for k, c in sorted(checks.items())])
    else:
        lines += ["These problems were not validated on a device (no `validation` sections).", ""]

    lines += ["## Hardware and versions", ""]
    envs = Counter((str((r.validation or {}).get("device")), str((r.validation or {}).get("torch")),
                    str((r.validation or {}).get("dtype"))) for r in records if r.validation)
    if envs:
        lines += _table(("device", "torch", "dtype", "problems"),
                        [(*env, c) for env, c in envs.most_common()])
    else:
        lines += ["No validation ran, so no timings or tolerances are recorded.", ""]

    lines += ["## Deduplication and split", "",
              ("Every problem has four keys: exact (canonical source with local names "
              "normalized), structural (op stream with sizes abstracted), near (MinHash LSH over "
              "5-token shingles, Jaccard >= threshold) and behaviour (traced aten ops and probe "
              "output statistics). Exact duplicates were dropped. A *family* is a connected "
              "component of problems sharing a provenance root or any of these keys; whole "
              "families go to one split (column `family`), so a problem's resized, renamed or "
              "re-epilogued relatives never straddle train and eval. Families are assigned "
              "stratified by category and difficulty tier."), ""]
    summary_path = split_dir / "split.json"
    if summary_path.exists():
        summary = json.loads(summary_path.read_text(encoding="utf-8"))
        lines += [f"Eval fraction {summary.get('eval_fraction')}, seed {summary.get('seed')}.", ""]
    lines += _table(("split", "problems", "families"),
                    [(s, len(p), len({row_family(r) for r in p})) for s, p in parts.items()])

    lines += ["## Contamination", ""]
    report_path = split_dir / "contamination.json"
    if report_path.exists():
        report = json.loads(report_path.read_text(encoding="utf-8"))
        benches = report.get("benchmarks") or []
        if benches:
            action = "dropped" if report.get("policy") == "drop" else "kept and marked"
            names = ", ".join("`{}` ({} problems)".format(b["spec"], b["items"]) for b in benches)
            lines += [(f"Checked against {names}: "
                      f"{report.get('contaminated', 0)} problem(s) matched and were {action} "
                      f"(matches by key: {report.get('matches_by_key') or {}}). A match is an "
                      "equal exact or structural key, near-duplicate Jaccard >= "
                      f"{report.get('threshold')}, or a shared {report.get('ngram')}-token window "
                      "of the normalized token stream."), ""]
        else:
            lines += ["No reference benchmark was given at split time.", ""]
    else:
        lines += ["No contamination report was found next to the split.", ""]

    lines += ["## Counts", ""]
    cats = Counter((r.category, str(row_difficulty(r))) for r in records)
    tiers = sorted({t for _, t in cats})
    lines += _table(("category", *tiers, "total"),
                    [(c, *(cats[(c, t)] for t in tiers), sum(cats[(c, t)] for t in tiers))
                     for c in sorted({c for c, _ in cats})])

    lines += ["## Columns", ""]
    lines += _table(("column", "type", "meaning"), [(f"`{c}`", t, d) for c, t, d in COLUMNS])

    lines += ["## Use", "", "```python", "from datasets import load_dataset",
              f"ds = load_dataset(\"{pretty_name}\")  # or the local folder", "```", "",
              ("Grade candidate kernels (records with `problem_id`, `source` of a `ModelNew`) "
              "against these references on a GPU:"), "", "```bash",
              "kernelmill grade problems.jsonl submissions.jsonl --out verdicts.jsonl", "```", "",
              ("For RL, the grader's TRL reward function reads the `reference` and `problem_id` "
              "columns of this dataset."), "",
              "## License", "", f"{LICENSE}.", ""]
    return "\n".join(lines)


def row_family(record: Record) -> str:
    return str(record.extra.get("split_group") or record.family)


def row_difficulty(record: Record) -> str:
    difficulty = (record.validation or {}).get("difficulty") or {}
    return str(difficulty.get("tier") or "unknown") if isinstance(difficulty, dict) else "unknown"


def publish_dataset(split_dir: str | Path, dataset_dir: str | Path, *,
                    push_to_hub: str | None = None, token: str | None = None,
                    pretty_name: str | None = None) -> StageStats:
    """Write the dataset folder from ``split_dir``/{train,eval}.jsonl; push it if asked."""
    start = time.perf_counter()
    stats = StageStats("publish")
    split_dir, dataset_dir = Path(split_dir), Path(dataset_dir)
    parts: dict[str, list[Record]] = {}
    for split in SPLITS:
        path = split_dir / f"{split}.jsonl"
        if path.exists():
            records = list(read_records(path))
            if records:
                parts[split] = records
    if not parts:
        raise KernelmillError(f"{split_dir}: no records in train.jsonl or eval.jsonl "
                              "(run `kernelmill split` first)")
    data_dir = dataset_dir / "data"
    if data_dir.exists():
        for stale in data_dir.glob("*.parquet"):
            stale.unlink()
    nbytes: dict[str, int] = {}
    for split, records in parts.items():
        nbytes[split] = write_parquet(records, data_dir / f"{split}-00000-of-00001.parquet")
        stats.count(split, len(records))
        stats.kept(len(records))
    name = pretty_name or push_to_hub or dataset_dir.name
    counts = {s: len(p) for s, p in parts.items()}
    (dataset_dir / "README.md").write_text(card_yaml(counts, name, nbytes) + "\n"
                                           + card_prose(parts, split_dir, name), encoding="utf-8")
    for extra in ("contamination.json", "contamination.md"):
        source = split_dir / extra
        if source.exists():
            (dataset_dir / extra).write_text(source.read_text(encoding="utf-8"), encoding="utf-8")
    if push_to_hub:
        push(dataset_dir, push_to_hub, token=token)
        stats.count("pushed")
    stats.seconds = time.perf_counter() - start
    return stats


def push(dataset_dir: str | Path, repo_id: str, *, token: str | None = None) -> str:
    """Create the dataset repo if needed and upload the folder; returns the commit URL."""
    from huggingface_hub import HfApi

    api = HfApi(token=token)
    api.create_repo(repo_id, repo_type="dataset", exist_ok=True)
    info = api.upload_folder(folder_path=str(dataset_dir), repo_id=repo_id, repo_type="dataset",
                             commit_message="Publish kernelmill dataset")
    return str(getattr(info, "commit_url", info))
