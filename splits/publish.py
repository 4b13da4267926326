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
import math
import os
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelmill.core.errors import KernelmillError
from kernelmill.core.problem import parse, parse_metadata
from kernelmill.core.record import Record
from kernelmill.core.stats import StageStats
from kernelmill.core.step import Step, option
from kernelmill.core.store import read_records
from kernelmill.grade.problems import distributions_column

from .contamination import describe_benchmark
from .prompt import TEMPLATE_VERSION, prompt_messages

SPLITS = ("train", "eval")
LICENSE = "apache-2.0"
DEFAULT_NAME = "kernelmill GPU-kernel problems"


def _features():
    """The columns' types, as ``datasets`` features (the parquet schema and the card's YAML)."""
    from datasets import Features, List, Value

    s, f, i, b = Value("string"), Value("float64"), Value("int32"), Value("bool")
    messages = List({"role": s, "content": s})
    return Features({
        "problem_id": s, "name": s, "description": s, "category": s, "level": i,
        "reference": s, "prompt": messages, "prompt_cuda": messages,
        "difficulty": s, "difficulty_score": f, "validated": b, "device": s, "dtype": s,
        "eager_ms": f, "inductor_ms": f, "inductor_speedup": f, "flops": f, "bytes": f,
        "roofline_ms": f, "atol": f, "rtol": f,
        "calibration_device": s, "calibration_scale": f, "calibration_numel": Value("int64"),
        "distributions": List({"name": s, "supported": b}),
        "family": s, "cluster": i, "structural_key": s, "near_group": s,
        "contamination": {"action": s, "matches": List({
            "benchmark": s, "item": s, "item_name": s, "key": s, "score": f})},
        "provenance": {"generator": s, "seed": s, "parent": s, "origin": s,
                       "operations": List({"op": s, "detail": s})},
        "validation": {
            "passed": b, "device": s, "device_name": s, "torch": s, "dtype": s,
            "flags": List(s), "eager_ms": f, "inductor_ms": f, "inductor_speedup": f,
            "flops": f, "bytes": f, "roofline_ms": f, "headroom": f, "atol": f, "rtol": f,
            "resized": f, "wall_s": f, "difficulty": {"tier": s, "score": f},
            "checks": List({"name": s, "passed": b, "value": f, "detail": s})},
    })


# (column, description); the types are in ``_features``
DESCRIPTIONS: dict[str, str] = {
    "problem_id": "stable id: hash of the canonical problem source",
    "name": "problem name",
    "description": "one-line description from the problem docstring",
    "category": "kind of computation (elementwise, matmul, convolution, ...)",
    "level": "KernelBench-style level (1 single op, 2 fused, 3 block)",
    "reference": "the PyTorch reference program (Model, get_inputs, get_init_inputs)",
    "prompt": "chat messages asking for a Triton ModelNew (TRL's conversational prompt column)",
    "prompt_cuda": "the same request for CUDA C++ through torch.utils.cpp_extension.load_inline",
    "difficulty": "difficulty tier from validation ('unknown' if not validated)",
    "difficulty_score": "difficulty score from validation",
    "validated": "every validation check passed (null: not validated)",
    "device": "device validation ran on",
    "dtype": "input dtype used for validation",
    "eager_ms": "eager PyTorch time (ms), at the calibration size on the calibration device",
    "inductor_ms": "torch.compile (Inductor) time (ms), same size and device",
    "inductor_speedup": "eager_ms / inductor_ms",
    "flops": "floating-point operations of one forward at the calibration size",
    "bytes": "bytes moved by one forward (lower bound) at the calibration size",
    "roofline_ms": "roofline time bound (ms) at the calibration size",
    "atol": "calibrated absolute tolerance for grading (at the calibration size)",
    "rtol": "calibrated relative tolerance for grading (at the calibration size)",
    "calibration_device": "device kind (cpu or cuda) that eager_ms, atol and rtol were measured on",
    "calibration_scale": ("factor the reference's size constants were scaled by before measuring "
                          "(synth.resize; null: measured at the published size)"),
    "calibration_numel": "largest tensor's element count at the calibration size (static estimate)",
    "distributions": ("the grader's input distributions, each supported where the reference stays "
                      "finite and its float32 noise within a quarter of the tolerance under it; "
                      "the grader draws trials only under supported ones (null: not measured)"),
    "family": "split family: problems sharing it are all in one split",
    "cluster": "cluster id (0 = largest)",
    "structural_key": "hash of the size-abstracted op stream",
    "near_group": "near-duplicate group (representative problem id)",
    "contamination": "benchmark matches when kept and marked, else null",
    "provenance": "generator, seed, parent, origin (relative) and the operations applied",
    "validation": "the validation section: checks (name, passed, value, detail), timings, tolerances",
}


def columns() -> list[tuple[str, Any, str]]:
    """(name, datasets feature, description) for every column, in order."""
    return [(name, feature, DESCRIPTIONS[name]) for name, feature in _features().items()]


def _type_name(feature: Any) -> str:
    """A short human type for the card's column table."""
    from datasets import List, Value

    if isinstance(feature, Value):
        return feature.dtype
    if isinstance(feature, List):
        return f"list[{_type_name(feature.feature)}]"
    if isinstance(feature, dict):
        return "struct{" + ", ".join(feature) + "}"
    return type(feature).__name__


def feature_yaml(feature: Any) -> dict[str, Any]:
    """One feature as the card's ``dataset_info.features`` YAML writes it (without its name)."""
    from datasets import List, Value

    if isinstance(feature, Value):
        return {"dtype": feature.dtype}
    if isinstance(feature, List):
        inner = feature_yaml(feature.feature)
        return {"list": inner.get("dtype") or inner.get("struct") or inner}
    if isinstance(feature, dict):
        return {"struct": [{"name": k, **feature_yaml(v)} for k, v in feature.items()]}
    raise TypeError(f"no YAML form for {feature!r}")


def _float(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        out = None if value is None else float(value)
    except (TypeError, ValueError):
        return None
    return out if out is None or math.isfinite(out) else None


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


def _description(source: str) -> str:
    try:
        return parse_metadata(ast.get_docstring(parse(source)))[0]
    except SyntaxError:
        return ""


def public_origin(origin: Any) -> str | None:
    """``provenance.origin`` without the builder's folders: package-relative for shipped seeds,
    else the file's last two path parts (``level1/19_ReLU.py``)."""
    if origin is None:
        return None
    text = str(origin)
    path = Path(text)
    if not path.is_absolute():
        return text
    import kernelmill.data

    for root in kernelmill.data.__path__:
        try:
            return "kernelmill/data/" + path.relative_to(root).as_posix()
        except ValueError:
            continue
    return "/".join(path.parts[-2:])


def _provenance(provenance: dict[str, Any]) -> dict[str, Any]:
    operations = []
    for op in provenance.get("operations") or []:
        if isinstance(op, dict):
            rest = {k: v for k, v in op.items() if k != "op"}
            operations.append({"op": _str(op.get("op")),
                               "detail": json.dumps(rest, sort_keys=True, default=str)
                               if rest else None})
        else:
            operations.append({"op": str(op), "detail": None})
    return {"generator": _str(provenance.get("generator")), "seed": _str(provenance.get("seed")),
            "parent": _str(provenance.get("parent")),
            "origin": public_origin(provenance.get("origin")), "operations": operations}


def _validation(v: dict[str, Any] | None) -> dict[str, Any] | None:
    if not v:
        return None
    difficulty = v.get("difficulty") if isinstance(v.get("difficulty"), dict) else {}
    checks = []
    for name, check in (v.get("checks") or {}).items():
        if isinstance(check, dict):
            passed = check.get("passed")
            checks.append({"name": str(name),
                           "passed": passed if isinstance(passed, bool) else None,
                           "value": _float(check.get("value")),
                           "detail": _str(check.get("detail"))})
    passed = v.get("passed")
    return {
        "passed": passed if isinstance(passed, bool) else None,
        **{k: _str(v.get(k)) for k in ("device", "device_name", "torch", "dtype")},
        "flags": [str(x) for x in v.get("flags") or []],
        **{k: _float(v.get(k)) for k in ("eager_ms", "inductor_ms", "inductor_speedup", "flops",
                                         "bytes", "roofline_ms", "headroom", "atol", "rtol",
                                         "resized", "wall_s")},
        "difficulty": {"tier": _str(difficulty.get("tier")),
                       "score": _float(difficulty.get("score"))},
        "checks": checks,
    }


def _contamination(contamination: Any) -> dict[str, Any] | None:
    if not isinstance(contamination, Mapping):
        return None
    matches = [{"benchmark": _str(m.get("benchmark")), "item": _str(m.get("item")),
                "item_name": _str(m.get("item_name")), "key": _str(m.get("key")),
                "score": _float(m.get("score"))}
               for m in contamination.get("matches") or [] if isinstance(m, dict)]
    return {"action": _str(contamination.get("action") or "kept and marked"), "matches": matches}


def device_kind(device: Any) -> str:
    """``cpu`` or ``cuda`` (a GPU named by its model, as older records do, is ``cuda``)."""
    return "cpu" if str(device).lower().startswith("cpu") else "cuda"


def calibration(record: Record) -> dict[str, Any]:
    """Where and at which size ``eager_ms``/``atol``/``rtol`` were measured.

    The validator shrinks problems on CPU (``synth.resize.shrink_for_cpu``) and records the factor
    in ``validation.resized``; the grader reproduces that size from ``calibration_scale``.
    """
    v = record.validation or {}
    if not v or not v.get("device"):
        return {"calibration_device": None, "calibration_scale": None, "calibration_numel": None}
    device = device_kind(v.get("device"))
    scale = _float(v.get("resized"))
    numel = None
    try:
        from kernelmill.synth.resize import largest_numel, resize_source

        source = resize_source(record.source, factor=scale).source if scale else record.source
        numel = largest_numel(source)
    except Exception:  # noqa: BLE001 — a size the static analysis cannot read stays null
        numel = None
    return {"calibration_device": device, "calibration_scale": scale,
            "calibration_numel": numel}


def row(record: Record) -> dict[str, Any]:
    """The dataset row of a record."""
    v = record.validation or {}
    difficulty = v.get("difficulty") if isinstance(v.get("difficulty"), dict) else {}
    dedup = record.dedup or {}
    return {
        "problem_id": record.id,
        "name": record.name,
        "description": _description(record.source),
        "category": record.category,
        "level": int(record.level or 1),
        "reference": record.source,
        "prompt": prompt_messages(record.source, "triton"),
        "prompt_cuda": prompt_messages(record.source, "cuda"),
        "difficulty": str(difficulty.get("tier") or "unknown"),
        "difficulty_score": _float(difficulty.get("score")),
        "validated": v.get("passed") if isinstance(v.get("passed"), bool) else None,
        "device": v.get("device"),
        "dtype": v.get("dtype"),
        **{k: _float(v.get(k)) for k in ("eager_ms", "inductor_ms", "inductor_speedup", "flops",
                                         "bytes", "roofline_ms", "atol", "rtol")},
        **calibration(record),
        "distributions": distributions_column(v),
        "family": family_of(record),
        "cluster": record.cluster,
        "structural_key": dedup.get("structural_key"),
        "near_group": dedup.get("near_group"),
        "contamination": _contamination(record.contamination),
        "provenance": _provenance(record.provenance or {}),
        "validation": _validation(record.validation),
    }


def write_parquet(records: Sequence[Record], path: Path) -> int:
    """Write the rows; returns the in-memory size of the table in bytes (the card states it)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [row(r) for r in records]
    table = pa.Table.from_pylist(rows, schema=_features().arrow_schema)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return int(table.nbytes)


def _size_category(n: int) -> str:
    for limit, label in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"),
                         (1_000_000, "100K<n<1M")):
        if n < limit:
            return label
    return "1M<n<10M"


def kernelmill_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("kernelmill")
    except PackageNotFoundError:
        return "unknown"


def card_yaml(counts: dict[str, int], pretty_name: str, nbytes: dict[str, int]) -> str:
    """The card's metadata block, checked by ``huggingface_hub.DatasetCardData``."""
    from huggingface_hub import DatasetCardData

    data = DatasetCardData(
        license=LICENSE, pretty_name=pretty_name, task_categories=["text-generation"],
        tags=["code", "gpu-kernels", "pytorch", "triton", "cuda", "kernelbench"],
        size_categories=[_size_category(sum(counts.values()))],
        configs=[{"config_name": "default",
                  "data_files": [{"split": s, "path": f"data/{s}-*"} for s in counts]}],
        dataset_info={
            "features": [{"name": name, **feature_yaml(feature)}
                         for name, feature in _features().items()],
            "splits": [{"name": s, "num_bytes": nbytes[s], "num_examples": n}
                       for s, n in counts.items()],
            "dataset_size": sum(nbytes.values()),
        })
    return "---\n" + data.to_yaml() + "\n---\n"


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return lines + [""]


def card_prose(parts: dict[str, list[Record]], split_dir: Path, pretty_name: str,
               repo_id: str | None = None) -> str:
    records = [r for part in parts.values() for r in part]
    n = len(records)
    lines = [f"# {pretty_name}", "",
             (f"{n} GPU-kernel problems in KernelBench format: each is a PyTorch reference program "
              "(`Model`, `get_inputs()`, `get_init_inputs()`) that a model should rewrite as a "
              f"faster kernel (`ModelNew`). Made with kernelmill {kernelmill_version()}."), ""]

    lines += ["## Prompts", "",
              ("`prompt` holds the request as chat messages (`[{role, content}]`, a system and a "
               "user message): the reference program in a fenced block, the task (a `ModelNew` "
               "with the same constructor and `forward` whose outputs match within tolerance, "
               "faster, with the main computation in custom kernels) and the output format (one "
               "fenced Python block holding the whole module). `prompt` asks for Triton, "
               "`prompt_cuda` for CUDA C++ through `load_inline`; both come from "
               f"`kernelmill.splits.prompt` (template version {TEMPLATE_VERSION})."), ""]

    lines += ["## How the problems were made", ""]
    generators = Counter((r.provenance or {}).get("generator") or "seed" for r in records)
    lines += _table(("generator", "problems"), sorted(generators.items(), key=lambda kv: -kv[1]))
    lines += [("Each problem's `provenance` column names its generator, the seed problem it "
               "descends from, its parent, the operations applied and, for imported files, the "
               "file's origin relative to its benchmark folder."), ""]

    lines += sources_and_licenses(records)

    lines += ["## Checks applied", ""]
    checks: dict[str, Counter] = {}
    why: dict[str, Counter] = {}
    for r in records:
        for name, check in ((r.validation or {}).get("checks") or {}).items():
            if isinstance(check, dict):
                state = {True: "passed", False: "failed"}.get(check.get("passed"), "skipped")
                checks.setdefault(name, Counter())[state] += 1
                if state == "skipped":
                    why.setdefault(name, Counter())[str(check.get("detail") or "")] += 1
    if checks:
        lines += _table(("check", "passed", "failed", "skipped", "why skipped (most often)"),
                        [(f"`{k}`", c["passed"], c["failed"], c["skipped"],
                          why[k].most_common(1)[0][0].replace("|", "/") if k in why else "")
                         for k, c in sorted(checks.items())])
    else:
        lines += ["These problems were not validated on a device (no `validation` sections).", ""]
    on_cpu = [r for r in records if r.validation and
              device_kind(r.validation.get("device")) == "cpu"]
    if on_cpu:
        resized = sum(1 for r in on_cpu if _float((r.validation or {}).get("resized")))
        never_run = sorted(k for k, c in checks.items() if c["skipped"] == len(records))
        skipped = (f"the checks {', '.join(f'`{k}`' for k in never_run)} were skipped on every "
                   "problem (table above), " if never_run else "")
        lines += [(f"{len(on_cpu)} problem(s) were validated on CPU. There, no GPU was measured: "
                   f"{skipped}`inductor_ms` and `roofline_ms` are null, `eager_ms` is a CPU "
                   "time, and "
                   f"{resized} problem(s) were shrunk first (`calibration_scale`), so their "
                   "`eager_ms`, `atol` and `rtol` hold at `calibration_numel` elements, not at the "
                   "published size. `kernelmill grade` on CPU grades at that same size."), ""]

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
                    [(s, len(p), count_families(p)) for s, p in parts.items()])

    lines += ["## Contamination", "", contamination_sentence(split_dir / "contamination.json"), ""]

    lines += ["## Counts", ""]
    cats = Counter((r.category, str(row_difficulty(r))) for r in records)
    order = {"easy": 0, "medium": 1, "hard": 2}  # tiers easiest first, then any other label
    tiers = sorted({t for _, t in cats}, key=lambda t: (order.get(t, 3), t))
    lines += _table(("category", *tiers, "total"),
                    [(c, *(cats[(c, t)] for t in tiers), sum(cats[(c, t)] for t in tiers))
                     for c in sorted({c for c, _ in cats})])

    lines += ["## Columns", ""]
    lines += _table(("column", "type", "meaning"),
                    [(f"`{c}`", _type_name(t), d) for c, t, d in columns()])

    where = repo_id or "path/to/this/dataset"
    lines += ["## Use", "", "```python", "from datasets import load_dataset",
              f"ds = load_dataset(\"{where}\")", "```", "",
              ("Grade candidate kernels against the eval split (on a GPU; on CPU problems are "
               "shrunk to their calibration size):"), "", "```bash",
              f"kernelmill grade {where} submissions.jsonl --split eval --out verdicts.jsonl",
              "```", "",
              ("`submissions.jsonl` rows are `{\"submission_id\", \"problem_id\", \"source\"}`. "
               "The exit status is 0 when every submission got a verdict; `kernelmill grade ... "
               "--fail-on hacked` (or `--fail-on incorrect`) exits 1 when one was flagged (or "
               "was wrong)."), "",
              ("Train with TRL's GRPO; the reward reads the `reference` column and the calibrated "
               "`atol`/`rtol`/`roofline_ms`:"), "", "```python",
              "from datasets import load_dataset",
              "from trl import GRPOConfig, GRPOTrainer",
              "from kernelmill.grade.trl import reward_fn",
              "",
              f"train = load_dataset(\"{where}\")[\"train\"]",
              ("# CUDA instead of Triton: train = train.remove_columns(\"prompt\")"
               ".rename_column(\"prompt_cuda\", \"prompt\")"),
              ("trainer = GRPOTrainer(model=\"Qwen/Qwen2.5-Coder-7B-Instruct\", "
               "reward_funcs=[reward_fn],"),
              "                      train_dataset=train, args=GRPOConfig(output_dir=\"grpo\"))",
              "trainer.train()", "```", "",
              ("The reward returns `None` (not applicable) for a problem whose reference fails "
               "to run, and logs compile, correct and hack rates and the mean speedup through "
               "the trainer's `log_metric`."), "",
              "## Limitations", "",
              ("Timings and tolerances come from one device and one software stack (see Hardware "
               "and versions); speedups measured elsewhere differ. The checks catch the kernel "
               "hacks the grader knows of, not every possible one. " +
               ("Problems are modules mined from the sources listed above, a small seed set and "
                "their variations, so categories are unevenly covered (see Counts)."
                if mined_sources(records) else
                "Problems are synthetic variations of a small seed set, so categories are "
                "unevenly covered (see Counts).")),
              "", "## License", "",
              (f"{LICENSE} for the problems kernelmill wrote; a problem mined from real code, "
               "and every variation of it, is under its source's license (Sources and "
               "licenses, and each row's `provenance`)." if mined_sources(records) else
               f"{LICENSE}."), ""]
    return "\n".join(lines)


def mined_sources(records: Sequence[Record]) -> Counter:
    """Problems per mined source ``(package, version, license)``: a record mined from real code
    (``provenance.mined``), or one whose seed or parent in ``records`` was."""
    mined = {r.id: (r.provenance or {}).get("mined") for r in records
             if (r.provenance or {}).get("mined")}
    counts: Counter = Counter()
    for record in records:
        provenance = record.provenance or {}
        info = provenance.get("mined") or mined.get(provenance.get("seed")) or \
            mined.get(provenance.get("parent"))
        if info:
            counts[(info.get("package") or info.get("source") or "?",
                    info.get("version") or "-", info.get("license") or "unknown")] += 1
    return counts


def sources_and_licenses(records: Sequence[Record]) -> list[str]:
    """The card's table of mined sources, their versions and licenses (none when nothing was
    mined)."""
    counts = mined_sources(records)
    if not counts:
        return []
    lines = ["## Sources and licenses", "",
             ("Problems mined from real code (`kernelmill mine`), and their variations, by source "
              "package, its version and its license as its metadata gives it (`kernelmill mine "
              "--licenses permissive` keeps only permissive ones):"), ""]
    return lines + _table(("source", "version", "license", "problems"),
                          [(*key, n) for key, n in counts.most_common()])


def contamination_sentence(report_path: Path) -> str:
    """What the contamination check found, or that nothing was checked."""
    if not report_path.exists():
        return "Not checked: no contamination report was found next to the split."
    report = json.loads(report_path.read_text(encoding="utf-8"))
    benches = report.get("benchmarks") or []
    if not benches:
        return ("Not checked: no reference benchmark was given at split time "
                "(`against = []`; the default is `builtin:kernelbench`).")
    action = "dropped" if report.get("policy") == "drop" else "kept and marked"
    names = "; ".join(describe_benchmark(b) for b in benches if isinstance(b, dict))
    strongest = Counter(str(p.get("key")) for p in report.get("problems") or []
                        if isinstance(p, dict))
    by_key = (" (by strongest match: " + ", ".join(f"{k} {n}" for k, n in sorted(
        strongest.items())) + ")") if strongest else ""
    return (f"{report.get('checked', '?')} problems were checked against {names}: "
            f"{report.get('contaminated', 0)} matched and were {action}{by_key}. A match is an "
            "equal exact or structural key, near-duplicate Jaccard >= "
            f"{report.get('threshold')}, or a shared {report.get('ngram')}-token window "
            "of the normalized token stream.")


def family_of(record: Record | dict) -> str:
    """The split family of a record (a ``Record`` or its JSON dict): the one definition that the
    dataset's ``family`` column, the card and the report all count."""
    if isinstance(record, Record):
        return str(record.split_group or record.family)
    provenance = record.get("provenance") or {}
    return str(record.get("split_group") or provenance.get("seed") or record.get("id"))


def count_families(records: Sequence[Record | dict]) -> int:
    return len({family_of(r) for r in records})


def row_difficulty(record: Record) -> str:
    difficulty = (record.validation or {}).get("difficulty") or {}
    return str(difficulty.get("tier") or "unknown") if isinstance(difficulty, dict) else "unknown"


def publish_dataset(split_dir: str | Path, dataset_dir: str | Path, *,
                    push_to_hub: str | None = None, token: str | None = None,
                    pretty_name: str | None = None, allow_empty: bool = False) -> StageStats:
    """Write the dataset folder from ``split_dir``/{train,eval}.jsonl; push it if asked. A split
    that came out empty is refused unless ``allow_empty``."""
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
    empty = [split for split in SPLITS if split not in parts]
    if empty and not allow_empty:
        raise KernelmillError(f"{split_dir}: the {empty[0]} split came out empty; a dataset "
                              "without it is refused (--allow-empty publishes it anyway)")
    data_dir = dataset_dir / "data"
    if data_dir.exists():
        for stale in data_dir.glob("*.parquet"):
            stale.unlink()
    nbytes: dict[str, int] = {}
    for split, records in parts.items():
        nbytes[split] = write_parquet(records, data_dir / f"{split}-00000-of-00001.parquet")
        stats.count(split, len(records))
        stats.kept(len(records))
    name = pretty_name or push_to_hub or DEFAULT_NAME
    counts = {s: len(p) for s, p in parts.items()}
    (dataset_dir / "README.md").write_text(
        card_yaml(counts, name, nbytes) + "\n" + card_prose(parts, split_dir, name, push_to_hub),
        encoding="utf-8")
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


@dataclass
class PublishConfig:
    """Knobs of the publish stage."""

    push_to_hub: str | None = option(None, "upload to this Hugging Face dataset repo (REPO_ID)")
    token: str | None = option(None, "Hugging Face token (default: $HF_TOKEN or the login)")
    name: str | None = option(None, "dataset name in the card (default: the repo id, else "
                                            f"{DEFAULT_NAME!r})")
    allow_empty: bool = option(False, "publish even when the train or eval split came out empty")


def _run(inputs: list[Path], out: Path, config: PublishConfig) -> StageStats:
    token = config.token or os.environ.get("HF_TOKEN")
    return publish_dataset(inputs[0], out, push_to_hub=config.push_to_hub, token=token,
                           pretty_name=config.name, allow_empty=config.allow_empty)


STEP = Step(
    name="publish", title="publish", config=PublishConfig, run=_run,
    inputs=("splits",), output="dataset", out_help="dataset folder to write",
    input_help="split folder (train.jsonl, eval.jsonl, contamination.json)",
    help="write a Hugging Face dataset folder (parquet + card), optionally push",
    description="Write DATASET/data/{split}-00000-of-00001.parquet and a README.md dataset card "
                "from a split folder; --push-to-hub uploads it.")
