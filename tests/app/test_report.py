"""report.html: every figure present, each embedded PNG a real picture, missing data said in words."""
from __future__ import annotations

import base64
import io
import json
import random
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from kernelmill.app.report import FIGURES, write_report
from kernelmill.core.interop import import_folder
from kernelmill.core.stats import StageStats
from kernelmill.core.store import JsonlWriter, read_records

FIGURE_NAMES = [name for name, _title, _make in FIGURES]
EXPECTED = {"funnel", "categories", "difficulty", "eager_runtime", "inductor_speedup",
            "roofline_headroom", "cluster_sizes", "contamination"}


class ReportParser(HTMLParser):
    """Collects each <figure>'s attributes and the data: URI of its <img>, and table ids."""

    def __init__(self):
        super().__init__()
        self.figures: dict[str, dict] = {}
        self.tables: list[str] = []
        self.external: list[str] = []
        self._current: str | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "figure":
            self._current = attrs["id"].removeprefix("fig-")
            self.figures[self._current] = {"attrs": attrs, "src": None}
        elif tag == "img":
            src = attrs.get("src", "")
            if not src.startswith("data:"):
                self.external.append(src)
            if self._current:
                self.figures[self._current]["src"] = src
        elif tag == "table":
            self.tables.append(attrs.get("id", ""))
        elif tag in ("link", "script") and (attrs.get("href") or attrs.get("src")):
            self.external.append(attrs.get("href") or attrs.get("src"))

    def handle_endtag(self, tag):
        if tag == "figure":
            self._current = None


def parse_report(page: Path) -> ReportParser:
    parser = ReportParser()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser


def decode_png(src: str) -> bytes:
    prefix = "data:image/png;base64,"
    assert src.startswith(prefix), src[:40]
    return base64.b64decode(src[len(prefix):], validate=True)


def assert_real_picture(png: bytes, name: str) -> None:
    import matplotlib.image

    assert png[:8] == b"\x89PNG\r\n\x1a\n", name
    assert len(png) > 5000, f"{name}: only {len(png)} bytes"
    pixels = matplotlib.image.imread(io.BytesIO(png), format="png")
    assert pixels.ndim == 3 and pixels.shape[0] > 200 and pixels.shape[1] > 400, name
    flat = pixels[..., :3].reshape(-1, 3)
    colours = np.unique((flat * 255).astype(np.uint8), axis=0)
    assert len(colours) > 8, f"{name}: {len(colours)} colours"
    ink = (flat.mean(axis=1) < 0.9).mean()  # share of pixels that are not near-white
    assert ink > 0.01, f"{name}: almost blank ({ink:.4f} of pixels drawn)"


def check_report(build_dir: Path) -> ReportParser:
    """The page parses, has every figure, and every figure is a real PNG equal to its file."""
    page = build_dir / "report.html"
    parsed = parse_report(page)
    assert set(parsed.figures) == EXPECTED == set(FIGURE_NAMES)
    assert not parsed.external, f"not self-contained: {parsed.external}"
    for name, figure in parsed.figures.items():
        png = decode_png(figure["src"])
        assert_real_picture(png, name)
        assert (build_dir / "figures" / f"{name}.png").read_bytes() == png
        state = figure["attrs"]["data-state"]
        assert state in ("data", "empty")
        assert (state == "empty") == bool(figure["attrs"].get("data-reason"))
    assert {"counts", "stages"} <= set(parsed.tables)
    return parsed


# -- a build folder shaped like one a GPU build leaves, made from the real seeds ---------------

def _gpu_validation(rng: random.Random, device: str) -> dict:
    eager = 10 ** rng.uniform(-0.5, 2)
    measured = device != "cpu"
    checks = {"deterministic": {"passed": True, "value": 0.0, "detail": "bitwise"},
              "inductor": ({"passed": True, "value": 1.2, "detail": "1.2x"} if measured else
                           {"passed": None, "value": None, "detail": "skipped on cpu"})}
    return {
        "device": device, "passed": True, "flags": [], "checks": checks,
        "eager_ms": eager,  # on CPU: timed at the shrunk size
        "inductor_ms": eager / 1.3 if measured else None,
        "inductor_speedup": 10 ** rng.gauss(0.1, 0.2) if measured else None,
        "headroom": 10 ** rng.uniform(0, 2.5) if measured else None,
        "difficulty": {"score": rng.random(), "tier": rng.choice(["easy", "medium", "hard"])},
    }


def make_build_dir(root: Path, seeds_dir: Path, device: str, n_seeds: int = 24) -> Path:
    rng = random.Random(7)
    build = root / f"build-{device}"
    import_folder(seeds_dir, build / "seeds.jsonl")
    records = list(read_records(build / "seeds.jsonl"))[:n_seeds]
    with JsonlWriter(build / "curated.jsonl") as curated, \
            JsonlWriter(build / "splits" / "train.jsonl") as train, \
            JsonlWriter(build / "splits" / "eval.jsonl") as evals:
        for i, record in enumerate(records):
            # families of 1-3 problems, the way the split stage names them; every third pair of
            # problems shares a near-duplicate group
            record = record.replace(validation=_gpu_validation(rng, device),
                                    cluster=rng.choice([0, 0, 0, 1, 1, 2, 3]),
                                    split="eval" if (i // 3) % 4 == 0 else "train",
                                    split_group=f"family-{i // 3}",
                                    dedup={"near_group": f"near-{i // 2}" if i % 6 < 2 else
                                           record.id, "structural_key": record.id})
            curated.write(record)
            (evals if record.split == "eval" else train).write(record)
    contaminated = records[-1]
    (build / "splits" / "contamination.json").write_text(json.dumps({
        "policy": "drop", "against": ["KernelBench/level1"], "contaminated": 1,
        "problems": [{"id": contaminated.id, "name": contaminated.name,
                      "category": contaminated.category, "action": "dropped",
                      "key": "structural",
                      "matches": [{"benchmark": "KernelBench/level1", "item": "23_Softmax.py",
                                   "item_name": "23_Softmax", "key": "structural",
                                   "score": 1.0}]}]}))
    stages = {}
    for name, kept, drops in (("import", len(records), {}), ("synth", 40, {"degenerate": 3}),
                              ("passed", 50, {"failed runs": 4, "failed input_sensitive": 6}),
                              ("dedup", 45, {"exact_duplicate": 5}), ("cluster", 45, {}),
                              ("split", 44, {"contaminated": 1}), ("publish", 44, {})):
        stats = StageStats(name)
        stats.kept(kept)
        for reason, n in drops.items():
            stats.dropped(reason, n)
        stats.seconds = 1.5
        stages[name] = {"finished": "now", "stats": stats.to_dict()}
    (build / "build_state.json").write_text(json.dumps(
        {"version": 1, "device": device, "stages": stages, "total_seconds": 12.0}))
    return build


def test_gpu_shaped_build_has_every_figure_with_data(tmp_path, seeds_dir):
    build = make_build_dir(tmp_path, seeds_dir, "cuda")
    write_report(build)
    parsed = check_report(build)
    for name, figure in parsed.figures.items():
        assert figure["attrs"]["data-state"] == "data", (name, figure["attrs"])
    page = (build / "report.html").read_text()
    assert "contamination" in parsed.tables and "23_Softmax" in page
    assert "failed input_sensitive" in page  # drop reasons reach the stage table


def test_cpu_build_says_what_was_not_measured(tmp_path, seeds_dir):
    build = make_build_dir(tmp_path, seeds_dir, "cpu")
    write_report(build)
    parsed = check_report(build)
    for name in ("inductor_speedup", "roofline_headroom"):
        attrs = parsed.figures[name]["attrs"]
        assert attrs["data-state"] == "empty"
        assert "not measured on CPU" in attrs["data-reason"]
    for name in ("funnel", "categories", "difficulty", "eager_runtime", "cluster_sizes",
                 "contamination"):
        assert parsed.figures[name]["attrs"]["data-state"] == "data", name


def test_empty_build_folder_still_renders_every_figure(tmp_path):
    write_report(tmp_path)
    parsed = check_report(tmp_path)
    assert all(f["attrs"]["data-state"] == "empty" for f in parsed.figures.values())


def test_check_report_rejects_a_blank_figure(tmp_path, seeds_dir):
    """The checks above can fail: a blank white PNG is caught."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4))
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    with pytest.raises(AssertionError):
        assert_real_picture(buffer.getvalue(), "blank")


def _table_rows(page: str, table_id: str) -> list[list[str]]:
    import re

    table = re.search(rf"<table id={table_id}>(.*?)</table>", page, re.DOTALL).group(1)
    return [[re.sub(r"<.*?>", "", c) for c in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", row)]
            for row in re.findall(r"<tr>(.*?)</tr>", table, re.DOTALL)]


def test_report_and_card_count_families_alike(tmp_path, seeds_dir):
    from kernelmill.splits.publish import publish_dataset

    build = make_build_dir(tmp_path, seeds_dir, "cuda")
    publish_dataset(build / "splits", build / "dataset")
    write_report(build)
    page = (build / "report.html").read_text()
    report = {row[0]: int(row[2]) for row in _table_rows(page, "counts")[1:] if row[2]}
    card = (build / "dataset" / "README.md").read_text()
    for split in ("train", "eval"):
        line = next(li for li in card.splitlines() if li.startswith(f"| {split} |"))
        assert int(line.split("|")[3]) == report[split], (split, line, report)
    assert report == {"train": 6, "eval": 2, "total": 8}  # family-0..7: 0 and 4 in eval


def test_checks_dedup_groups_and_missing_categories_are_on_the_page(tmp_path, seeds_dir):
    build = make_build_dir(tmp_path, seeds_dir, "cpu")
    write_report(build)
    page = (build / "report.html").read_text()
    checks = {row[0]: row[1:] for row in _table_rows(page, "checks")[1:]}
    assert checks["deterministic"][:3] == ["24", "0", "0"]
    assert checks["inductor"] == ["0", "0", "24", "skipped on cpu"]  # skipped on CPU, and why
    groups = _table_rows(page, "dedup")[1:]
    assert groups and all(row[0] == "near duplicate" and row[2] == "2" for row in groups)
    records = list(read_records(build / "curated.jsonl"))
    first_pair = {records[0].name, records[1].name}
    assert any(set(row[4].split(", ")) == first_pair for row in groups)
    train = {r.category for r in read_records(build / "splits" / "train.jsonl")}
    evals = {r.category for r in read_records(build / "splits" / "eval.jsonl")}
    if train - evals:
        assert 'id=missing-eval' in page and min(train - evals) in page
    # the funnel, clusters and checks come with a contamination verdict that says what was done
    assert "No contamination findings" not in page  # one finding was recorded


@pytest.mark.parametrize("report, expected", [
    (None, "Contamination not checked: no contamination report"),
    ({"policy": "drop", "against": [], "benchmarks": [], "problems": []},
     "Contamination not checked: no reference benchmark was given"),
    ({"policy": "drop", "against": ["kb"], "checked": 24,
      "benchmarks": [{"spec": "kb", "items": 250}], "problems": []},
     "No contamination findings: 24 problems checked against kb (250 items)."),
    ({"policy": "drop", "against": ["builtin:kernelbench"], "checked": 24,
      "benchmarks": [{"spec": "builtin:kernelbench", "name": "KernelBench", "items": 270,
                      "kind": "fingerprints", "sha256": "6ca04c3859bb96c5",
                      "levels": {"level1": 100, "level2": 100, "level3": 50, "level4": 20}}],
      "problems": []},
     "No contamination findings: 24 problems checked against KernelBench (270 problems: level1 "
     "100, level2 100, level3 50, level4 20; fingerprints sha256 6ca04c3859bb)."),
])
def test_contamination_says_whether_anything_was_checked(tmp_path, seeds_dir, report, expected):
    build = make_build_dir(tmp_path, seeds_dir, "cuda", n_seeds=6)
    path = build / "splits" / "contamination.json"
    if report is None:
        path.unlink()
    else:
        path.write_text(json.dumps(report))
    write_report(build)
    page = (build / "report.html").read_text()
    assert expected in page
    if report is None or not report["benchmarks"]:
        assert "No contamination findings" not in page


def test_cluster_bars_are_labelled_by_category():
    from kernelmill.app.report import cluster_labels

    records = [{"cluster": 0, "category": "matmul"}, {"cluster": 0, "category": "matmul"},
               {"cluster": 0, "category": "reduction"}, {"cluster": 1, "category": "conv"},
               {"cluster": None, "category": "x"}]
    assert cluster_labels(records) == {0: "0: matmul (2/3)", 1: "1: conv"}


def test_checks_scope_names_only_the_stages_that_dropped(tmp_path, seeds_dir):
    import re

    build = make_build_dir(tmp_path, seeds_dir, "cpu")
    published = sum(1 for split in ("train", "eval")
                    for _ in read_records(build / "splits" / f"{split}.jsonl"))
    stages = {}
    for name, kept, drops in (("validate", 40, {"failed runs": 4}),
                              ("filter", published + 5, {"low headroom": 2}),
                              ("dedup", published, {"exact_duplicate": 5}),
                              ("cluster", published, {}), ("split", published, {})):
        stats = StageStats(name)
        stats.kept(kept)
        for reason, n in drops.items():
            stats.dropped(reason, n)
        stages[name] = {"finished": "now", "stats": stats.to_dict()}
    (build / "build_state.json").write_text(json.dumps(
        {"version": 1, "device": "cpu", "stages": stages, "total_seconds": 12.0}))
    write_report(build)
    scope = re.search(r"<p id=checks-scope>(.*?)</p>", (build / "report.html").read_text(),
                      re.DOTALL).group(1)
    assert f"({published + 7} were validated; the filter and dedup stages dropped the others)" \
        in scope, scope
