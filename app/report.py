"""``report.html``: one self-contained page about a build, with its figures also as PNG files.

The page is made from what the build left in its folder: the per-stage counts in
``build_state.json`` (the funnel), the split records (categories, difficulty, runtimes, speedups,
roofline headroom), the curated records (cluster sizes) and ``splits/contamination.json``. Every
figure is always present: when its data is missing (a CPU build measures no runtimes) the figure
says why in words, and the page marks it ``data-state="empty"`` with the reason.
"""
from __future__ import annotations

import base64
import html
import io
import json
import logging
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kernelmill.core.stats import StageStats
from kernelmill.core.store import read_jsonl
from kernelmill.splits.contamination import describe_benchmark
from kernelmill.splits.publish import count_families

log = logging.getLogger("kernelmill")

SPLITS = ("train", "eval")
SPLIT_COLORS = {"train": "#4C72B0", "eval": "#DD8452", "unsplit": "#8C8C8C"}
KEPT_COLOR = "#55A868"
DROP_COLORS = ("#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C", "#CCB974", "#64B5CD",
               "#E17C05", "#5F4690", "#1D6996")


class NoData(Exception):
    """A figure has nothing to show; the message says why, in words for the reader."""


@dataclass
class ReportData:
    """Everything the page shows, read once from the build folder."""

    build_dir: Path
    device: str = "unknown"
    stages: list[StageStats] = field(default_factory=list)
    records: dict[str, list[dict]] = field(default_factory=dict)  # split -> records
    curated: list[dict] = field(default_factory=list)
    contamination: Any = None
    total_seconds: float | None = None

    @property
    def all_records(self) -> list[dict]:
        return [r for rows in self.records.values() for r in rows]

    def on_cpu(self) -> bool:
        return self.device == "cpu"

    def validation_values(self, key: str) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {}
        for split, rows in self.records.items():
            values = []
            for record in rows:
                value = (record.get("validation") or {}).get(key)
                if isinstance(value, (int, float)) and not isinstance(value, bool) \
                        and math.isfinite(value) and value > 0:
                    values.append(float(value))
            if values:
                out[split] = values
        return out


def _read_rows(path: Path) -> list[dict]:
    return list(read_jsonl(path)) if path.exists() else []


def load_report_data(build_dir: str | Path) -> ReportData:
    build_dir = Path(build_dir)
    data = ReportData(build_dir)
    state_path = build_dir / "build_state.json"
    if state_path.exists():
        state = json.loads(state_path.read_text(encoding="utf-8"))
        data.device = state.get("device", "unknown")
        data.total_seconds = state.get("total_seconds")
        for entry in state.get("stages", {}).values():
            if entry.get("stats"):
                data.stages.append(StageStats.from_dict(entry["stats"]))
    for split in SPLITS:
        rows = _read_rows(build_dir / "splits" / f"{split}.jsonl")
        if rows:
            data.records[split] = rows
    data.curated = _read_rows(build_dir / "curated.jsonl")
    if not data.records and data.curated:
        data.records["unsplit"] = data.curated
    contamination = build_dir / "splits" / "contamination.json"
    if contamination.exists():
        try:
            data.contamination = json.loads(contamination.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            log.warning(f"{contamination}: unreadable ({exc}); contamination left out of the report")
    if data.device == "unknown":
        devices = {str((r.get("validation") or {}).get("device", "")).split(":")[0]
                   for r in data.all_records} - {""}
        if len(devices) == 1:
            data.device = devices.pop()
    return data


# -- figures ----------------------------------------------------------------------------------

def _figure(width: float = 7.5, height: float = 4.2):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=110)
    return fig, fig.add_subplot(1, 1, 1)


def _style(ax, title: str, xlabel: str = "", ylabel: str = "") -> None:
    ax.set_title(title, loc="left", fontsize=12, fontweight="bold")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.spines[["top", "right"]].set_visible(False)
    ax.grid(axis="both", alpha=0.25)
    from matplotlib.ticker import MaxNLocator

    counts_axis = ax.xaxis if xlabel == "problems" else ax.yaxis
    if "problems" in (xlabel, ylabel):
        counts_axis.set_major_locator(MaxNLocator(integer=True))


def funnel_figure(data: ReportData):
    """Problems through the stages: kept, and dropped by reason, per stage."""
    # validate drops nothing (validation enriches); the filter stage counts every problem and
    # drops the failed ones, so the funnel shows that one where it ran.
    names = {s.stage for s in data.stages}
    stages = [s for s in data.stages if (s.n_kept_all or s.n_dropped)
              and not (s.stage == "validate" and "filter" in names)]
    if not stages:
        raise NoData("no stage has finished yet")
    reasons = Counter()
    for stats in stages:
        reasons.update(stats.drop_reasons())
    top = [r for r, _ in reasons.most_common(len(DROP_COLORS) - 1)]
    colors = {r: DROP_COLORS[i] for i, r in enumerate(top)}
    fig, ax = _figure(8.5, 0.55 * len(stages) + 2.2)
    ys = list(range(len(stages)))[::-1]
    shown: set[str] = set()
    for y, stats in zip(ys, stages):  # each bar centred on 0, so the stages narrow as a funnel
        start = -(stats.n_kept_all + stats.n_dropped) / 2
        ax.barh(y, stats.n_kept_all, left=start, color=KEPT_COLOR,
                label="kept" if "kept" not in shown else None)
        shown.add("kept")
        left = start + stats.n_kept_all
        for reason, n in sorted(stats.drop_reasons().items(), key=lambda kv: -kv[1]):
            if not n:
                continue
            key = reason if reason in colors else "other"
            label = (f"dropped: {key}"[:60]) if key not in shown else None
            ax.barh(y, n, left=left, color=colors.get(reason, DROP_COLORS[-1]), label=label)
            shown.add(key)
            left += n
        ax.text(left, y, f"  {stats.n_kept_all} kept" + (f", {stats.n_dropped} dropped"
                                                     if stats.n_dropped else ""),
                va="center", fontsize=8)
    hidden = "validate" in names and not any(s.stage == "validate" for s in stages)
    ax.set_yticks(ys, ["validate + filter" if hidden and s.stage == "filter" else s.stage
                       for s in stages])
    widest = max(s.n_kept_all + s.n_dropped for s in stages)
    ax.set_xlim(-widest / 2 - 1, widest * 1.1 + 1)  # room on the right for the counts
    _style(ax, "Problems through the build", "problems (each bar centred)")
    ax.set_xticks([])
    ax.legend(fontsize=7, loc="upper right", frameon=False)  # the counts sit lower right
    fig.tight_layout()
    return fig


def _split_counts(data: ReportData, key: Callable[[dict], str | None]) -> dict[str, Counter]:
    out = {}
    for split, rows in data.records.items():
        out[split] = Counter(k for k in (key(r) for r in rows) if k is not None)
    return out


def _grouped_bars(data: ReportData, counts: dict[str, Counter], title: str, xlabel: str,
                  order: list[str] | None = None):
    labels = order or sorted({k for c in counts.values() for k in c})
    if not labels:
        raise NoData("no records in the splits")
    fig, ax = _figure(max(7.5, 0.45 * len(labels) + 2), 4.4)
    width = 0.8 / max(1, len(counts))
    for i, (split, counter) in enumerate(counts.items()):
        xs = [j + (i - (len(counts) - 1) / 2) * width for j in range(len(labels))]
        ax.bar(xs, [counter.get(label, 0) for label in labels], width=width,
               color=SPLIT_COLORS.get(split), label=f"{split} ({sum(counter.values())})")
    ax.set_xticks(range(len(labels)), labels, rotation=35 if len(labels) > 5 else 0,
                  ha="right" if len(labels) > 5 else "center", fontsize=8)
    _style(ax, title, xlabel, "problems")
    ax.legend(frameon=False)
    fig.tight_layout()
    return fig


def category_figure(data: ReportData):
    counts = _split_counts(data, lambda r: r.get("category") or "unknown")
    return _grouped_bars(data, counts, "Categories per split", "category")


def _tier(record: dict) -> str | None:
    difficulty = (record.get("validation") or {}).get("difficulty")
    if isinstance(difficulty, dict):
        tier = difficulty.get("tier")
        return None if tier is None else str(tier)
    return None


def difficulty_figure(data: ReportData):
    counts = _split_counts(data, _tier)
    if not any(counts.values()):
        raise NoData("no difficulty recorded (validation did not score difficulty)")
    labels = sorted({k for c in counts.values() for k in c},
                    key=lambda t: ({"easy": 0, "medium": 1, "hard": 2}.get(t, 3), t))
    return _grouped_bars(data, counts, "Difficulty tier per split", "tier", labels)


def _not_measured(data: ReportData, what: str) -> NoData:
    if data.on_cpu():
        return NoData(f"{what} not measured on CPU: validate on a GPU to see it")
    return NoData(f"no {what} recorded in the validated problems")


def _histogram(data: ReportData, key: str, what: str, title: str, xlabel: str,
               log_x: bool = True, marker: float | None = None, marker_label: str = "",
               unit: str = ""):
    import numpy as np

    values = data.validation_values(key)
    if not values:
        raise _not_measured(data, what)
    every = np.concatenate([np.asarray(v) for v in values.values()])
    if log_x:
        lo, hi = np.log10(every.min()), np.log10(every.max())
        if hi - lo < 0.1:
            lo, hi = lo - 0.5, hi + 0.5
        bins = np.logspace(lo, hi, 30)
    else:
        bins = 30
    fig, ax = _figure()
    ax.hist([values[s] for s in values], bins=bins, stacked=True,
            color=[SPLIT_COLORS.get(s) for s in values],
            label=[f"{s} ({len(values[s])})" for s in values])
    if log_x:
        ax.set_xscale("log")
    if marker is not None:
        ax.axvline(marker, color="black", linestyle="--", linewidth=1)
        ax.text(marker, ax.get_ylim()[1] * 0.95, f" {marker_label}", fontsize=8, va="top")
    median = float(np.median(every))
    _style(ax, title, xlabel, "problems")
    ax.legend(frameon=False, title=f"median {median:.3g}{unit}", fontsize=8, title_fontsize=8)
    fig.tight_layout()
    return fig


def runtime_figure(data: ReportData):
    title = "Eager runtime (PyTorch)"
    if data.on_cpu():  # the validator shrinks problems for the CPU: not GPU-comparable times
        title = "Eager runtime on CPU, at the sizes shrunk for CPU"
    return _histogram(data, "eager_ms", "eager runtime", title, "milliseconds (log scale)",
                      unit=" ms")


def speedup_figure(data: ReportData):
    return _histogram(data, "inductor_speedup", "Inductor speedup",
                      "TorchInductor speedup over eager", "eager time / Inductor time (log scale)",
                      marker=1.0, marker_label="no speedup", unit="x")


def headroom_figure(data: ReportData):
    return _histogram(data, "headroom", "roofline headroom", "Roofline headroom",
                      "eager time / roofline lower bound (log scale)",
                      marker=1.0, marker_label="at the roofline", unit="x")


MAX_CLUSTER_BARS = 40


def cluster_labels(records: list[dict]) -> dict[Any, str]:
    """``"id: category"`` per cluster, naming its most common category (and its share when the
    cluster mixes categories)."""
    members: dict[Any, Counter] = {}
    for r in records:
        if r.get("cluster") is not None:
            members.setdefault(r["cluster"], Counter())[r.get("category") or "unknown"] += 1
    labels = {}
    for cluster, categories in members.items():
        top, n = categories.most_common(1)[0]
        total = sum(categories.values())
        labels[cluster] = f"{cluster}: {top}" + ("" if n == total else f" ({n}/{total})")
    return labels


def cluster_figure(data: ReportData):
    # the published problems when the split ran (the counts table counts those), else curated
    records, which = ((data.all_records, "published problems") if data.all_records
                      else (data.curated, "problems"))
    sizes = Counter(r.get("cluster") for r in records if r.get("cluster") is not None)
    if not sizes:
        raise NoData("no cluster ids recorded (the cluster stage has not run)")
    ranked = sizes.most_common()
    shown = ranked[:MAX_CLUSTER_BARS]
    labels = cluster_labels(records)
    fig, ax = _figure(max(7.5, min(16, 0.3 * len(shown) + 3)), 5.2)
    bars = ax.bar(range(len(shown)), [n for _, n in shown], color="#4C72B0")
    ax.bar_label(bars, fontsize=7)
    ax.set_xticks(range(len(shown)), [labels[c] for c, _ in shown], fontsize=7, rotation=60,
                  ha="right")
    more = f"; the {len(ranked) - len(shown)} smallest not drawn" if len(ranked) > len(shown) \
        else ""
    _style(ax, f"Cluster sizes ({len(ranked)} clusters, {sum(sizes.values())} {which}{more})",
           "cluster: its most common category (largest first)", "problems")
    fig.tight_layout()
    return fig


def contamination_findings(contamination: Any) -> list[dict]:
    """The list of findings in ``contamination.json``, whatever its top-level shape."""
    if isinstance(contamination, list):
        return [f for f in contamination if isinstance(f, dict)]
    if isinstance(contamination, dict):
        for key in ("findings", "contaminated", "matches", "problems"):
            value = contamination.get(key)
            if isinstance(value, list):
                return [f for f in value if isinstance(f, dict)]
    return []


def _finding_key(finding: dict) -> str:
    for key in ("key", "match", "matched_by", "by", "kind", "method"):
        value = finding.get(key)
        if value:
            return ", ".join(map(str, value)) if isinstance(value, list) else str(value)
    return "match"


def contamination_figure(data: ReportData):
    if data.contamination is None:
        raise NoData("no contamination report (the split stage has not run)")
    findings = contamination_findings(data.contamination)
    if not findings:
        benchmarks = data.contamination.get("against") if isinstance(data.contamination,
                                                                     dict) else None
        if benchmarks:
            raise NoData(f"no contamination found against {len(benchmarks)} benchmark(s)")
        raise NoData("no benchmark given to check against (against = [])")
    counts = Counter(_finding_key(f) for f in findings)
    fig, ax = _figure()
    labels = [k for k, _ in counts.most_common()]
    ax.barh(range(len(labels))[::-1], [counts[k] for k in labels], color=DROP_COLORS[0])
    ax.set_yticks(range(len(labels))[::-1], labels)
    _style(ax, f"Contamination findings ({len(findings)})", "problems", "matched by")
    fig.tight_layout()
    return fig


FIGURES: tuple[tuple[str, str, Callable[[ReportData], Any]], ...] = (
    ("funnel", "Funnel: problems kept and dropped per stage", funnel_figure),
    ("categories", "Category distribution per split", category_figure),
    ("difficulty", "Difficulty distribution per split", difficulty_figure),
    ("eager_runtime", "Eager runtime", runtime_figure),
    ("inductor_speedup", "TorchInductor speedup", speedup_figure),
    ("roofline_headroom", "Roofline headroom", headroom_figure),
    ("cluster_sizes", "Cluster sizes", cluster_figure),
    ("contamination", "Contamination findings", contamination_figure),
)


def placeholder_figure(title: str, reason: str):
    """A figure that says in words why there is nothing to plot."""
    from matplotlib.patches import Rectangle

    fig, ax = _figure(7.5, 3.0)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.add_patch(Rectangle(
        (0.02, 0.05), 0.96, 0.8, facecolor="#F3F3F3", edgecolor="#BBBBBB", hatch="//",
        linewidth=1))
    ax.text(0.5, 0.45, reason, ha="center", va="center", fontsize=12, wrap=True,
            bbox={"facecolor": "white", "edgecolor": "#999999", "boxstyle": "round,pad=0.6"})
    ax.set_title(title, loc="left", fontsize=12, fontweight="bold")
    ax.set_axis_off()
    return fig


def _png(fig) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    return buffer.getvalue()


@dataclass
class RenderedFigure:
    name: str
    title: str
    png: bytes
    empty_reason: str | None = None


def render_figures(data: ReportData) -> list[RenderedFigure]:
    rendered = []
    for name, title, make in FIGURES:
        try:
            rendered.append(RenderedFigure(name, title, _png(make(data))))
        except NoData as reason:
            rendered.append(RenderedFigure(name, title, _png(placeholder_figure(title, str(reason))),
                                           str(reason)))
    return rendered


# -- the page ---------------------------------------------------------------------------------

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2em auto;
max-width:1180px;color:#222;padding:0 1em}
h1{margin-bottom:.2em}.sub{color:#666;margin-top:0}
table{border-collapse:collapse;margin:1em 0;font-size:14px}
th,td{border-bottom:1px solid #ddd;padding:4px 10px;text-align:left}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(520px,1fr));gap:1.2em}
figure{margin:0;border:1px solid #e4e4e4;border-radius:6px;padding:.6em;background:#fff}
figure img{width:100%;height:auto}figcaption{font-size:13px;color:#555}
figure[data-state=empty] figcaption{color:#a33}
code{background:#f4f4f4;padding:1px 4px;border-radius:3px}
.warn{color:#a33;font-weight:600}
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _stage_table(data: ReportData) -> str:
    rows = []
    for stats in data.stages:
        reasons = "; ".join(f"{_e(r)}: {n}" for r, n in
                            sorted(stats.drop_reasons().items(), key=lambda kv: -kv[1]) if n)
        rows.append(f"<tr><td>{_e(stats.stage)}</td><td class=n>{stats.n_kept_all}</td>"
                    f"<td class=n>{stats.n_dropped}</td><td>{reasons}</td>"
                    f"<td class=n>{stats.seconds:.1f}</td></tr>")
    return ("<table id=stages><tr><th>stage</th><th class=n>kept</th><th class=n>dropped</th>"
            "<th>why dropped</th><th class=n>seconds</th></tr>" + "".join(rows) + "</table>")


def _counts_table(data: ReportData) -> str:
    rows = []
    for split, records in data.records.items():
        categories = len({r.get("category") for r in records})
        families = count_families(records)
        clusters = len({r.get("cluster") for r in records if r.get("cluster") is not None})
        rows.append(f"<tr><td>{_e(split)}</td><td class=n>{len(records)}</td>"
                    f"<td class=n>{families}</td><td class=n>{categories}</td>"
                    f"<td class=n>{clusters}</td></tr>")
    every = data.all_records
    categories = len({r.get("category") for r in every})
    clusters = len({r.get("cluster") for r in every if r.get("cluster") is not None})
    rows.append(f"<tr><th>total</th><th class=n>{len(every)}</th>"
                f"<th class=n>{count_families(every)}</th><th class=n>{categories}</th>"
                f"<th class=n>{clusters}</th></tr>")
    return ("<table id=counts><tr><th>split</th><th class=n>problems</th><th class=n>families"
            "</th><th class=n>categories</th><th class=n>clusters</th></tr>" + "".join(rows)
            + "</table>")


def _checks_table(data: ReportData) -> str:
    """Every validation check: how many problems passed, failed or skipped it, and why skipped."""
    counts: dict[str, Counter] = {}
    skipped_why: dict[str, Counter] = {}
    for record in data.all_records:
        for name, check in ((record.get("validation") or {}).get("checks") or {}).items():
            if not isinstance(check, dict):
                continue
            state = {True: "passed", False: "failed"}.get(check.get("passed"), "skipped")
            counts.setdefault(name, Counter())[state] += 1
            if state == "skipped":
                skipped_why.setdefault(name, Counter())[str(check.get("detail") or "")] += 1
    if not counts:
        return "<p id=checks-none>No validation checks recorded (validation has not run).</p>"
    validated = next((s.n_kept + s.n_dropped for s in data.stages if s.stage == "filter"), None)
    # the stages after validation that dropped some, named as the funnel counts them
    after = next((i for i, s in enumerate(data.stages) if s.stage == "filter"), 0)
    droppers = [s.stage for s in data.stages[after:] if s.n_dropped]
    named = (", ".join(droppers[:-1]) + " and " + droppers[-1] if len(droppers) > 1
             else "".join(droppers))
    scope = (f"<p id=checks-scope>Checks of the {len(data.all_records)} published problems"
             + (f" ({validated} were validated; the {named} stage"
                f"{'s' if len(droppers) > 1 else ''} dropped the others)"
                if validated and validated != len(data.all_records) and droppers else "")
             + ". A skipped check was not run on that problem; the reason is the most common "
             "one.</p>")
    rows = []
    for name in sorted(counts):
        c = counts[name]
        why = skipped_why.get(name)
        reason = _e(why.most_common(1)[0][0]) if why else ""
        rows.append(f"<tr><td><code>{_e(name)}</code></td><td class=n>{c['passed']}</td>"
                    f"<td class=n>{c['failed']}</td><td class=n>{c['skipped']}</td>"
                    f"<td>{reason}</td></tr>")
    return (scope + "<table id=checks><tr><th>check</th><th class=n>passed</th>"
            "<th class=n>failed</th><th class=n>skipped</th><th>why skipped</th></tr>"
            + "".join(rows) + "</table>")


MAX_GROUP_ROWS = 50


def dedup_groups(records: list[dict]) -> list[tuple[str, str, list[dict]]]:
    """(key kind, key, members) of every structural or near-duplicate group of 2+ problems,
    largest first."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for record in records:
        dedup = record.get("dedup") or {}
        for kind in ("near_group", "structural_key"):
            key = dedup.get(kind)
            if key:
                groups.setdefault((kind, str(key)), []).append(record)
    found = [(kind, key, members) for (kind, key), members in groups.items() if len(members) > 1]
    return sorted(found, key=lambda g: (-len(g[2]), g[0], g[1]))


def _dedup_table(data: ReportData) -> str:
    records = data.curated or data.all_records
    dropped = sum(n for stats in data.stages if stats.stage == "dedup"
                  for n in stats.drop_reasons().values())
    note = (f"<p>{dropped} exact duplicate(s) were dropped by the dedup stage.</p>"
            if dropped else "")
    if not any(r.get("dedup") for r in records):
        return note + "<p id=dedup-none>No dedup keys recorded (the dedup stage has not run).</p>"
    groups = dedup_groups(records)
    if not groups:
        return note + ("<p id=dedup-none>Every problem is alone in its structural and "
                       "near-duplicate group.</p>")
    split_of = {r.get("id"): split for split, rows in data.records.items() for r in rows}
    rows = []
    for kind, key, members in groups[:MAX_GROUP_ROWS]:
        names = ", ".join(_e(m.get("name") or m.get("id")) for m in members[:12])
        if len(members) > 12:
            names += f", … {len(members) - 12} more"
        splits = ", ".join(sorted({str(split_of.get(m.get("id"), "unsplit")) for m in members}))
        rows.append(f"<tr><td>{'near duplicate' if kind == 'near_group' else 'structural'}</td>"
                    f"<td><code>{_e(key[:16])}</code></td><td class=n>{len(members)}</td>"
                    f"<td>{_e(splits)}</td><td>{names}</td></tr>")
    more = (f"<p>{len(groups) - MAX_GROUP_ROWS} more group(s) not shown.</p>"
            if len(groups) > MAX_GROUP_ROWS else "")
    return (note + "<table id=dedup><tr><th>group</th><th>key</th><th class=n>problems</th>"
            "<th>splits</th><th>members</th></tr>" + "".join(rows) + "</table>" + more)


def _missing_from_eval(data: ReportData) -> str:
    train = {r.get("category") for r in data.records.get("train", [])}
    evals = {r.get("category") for r in data.records.get("eval", [])}
    missing = sorted(str(c) for c in train - evals)
    if not data.records.get("eval") or not missing:
        return ""
    return (f"<p id=missing-eval class=warn>Warning: no eval problem of categor"
            f"{'y' if len(missing) == 1 else 'ies'} {_e(', '.join(missing))} "
            "(present in train): eval scores say nothing about them.</p>")


def _finding_row(finding: dict, names: dict[str, str] | None = None) -> dict[str, Any]:
    """A finding's scalar fields, plus the benchmark item and score of its strongest match
    (``names``: benchmark spec -> the name the report gives it)."""
    row = {k: v for k, v in finding.items() if not isinstance(v, (dict, list))}
    matches = finding.get("matches")
    if isinstance(matches, list) and matches and isinstance(matches[0], dict):
        best = matches[0]
        bench = str(best.get("benchmark") or "")
        item = str(best.get("item") or best.get("item_name") or "")
        row["matched"] = (f"{(names or {}).get(bench, bench)}: {item}" if bench else item)[:120]
        if "score" in best:
            row["score"] = best["score"]
        row["matches"] = len(matches)
    return row


def _contamination_table(data: ReportData) -> str:
    report = data.contamination if isinstance(data.contamination, dict) else {}
    benchmarks = report.get("benchmarks") or [{"spec": b} for b in report.get("against") or []]
    bench_names = {str(b.get("spec")): str(b.get("name") or b.get("spec"))
                   for b in benchmarks if isinstance(b, dict)}
    findings = [_finding_row(f, bench_names)
                for f in contamination_findings(data.contamination)]
    if data.contamination is None:
        return ("<p id=contamination-unchecked>Contamination not checked: no contamination "
                "report (the split stage has not run).</p>")
    if not benchmarks and not findings:
        return ("<p id=contamination-unchecked>Contamination not checked: no reference "
                "benchmark was given (<code>against = []</code>; the default is "
                "<code>builtin:kernelbench</code>).</p>")
    names = "; ".join(_e(describe_benchmark(b)) for b in benchmarks if isinstance(b, dict))
    checked = report.get("checked")
    checked_text = "" if checked is None else _e(checked) + " problems "
    if not findings:
        return (f"<p id=contamination-none>No contamination findings: "
                f"{checked_text}checked against {names}.</p>")
    action = "kept and marked" if report.get("policy") == "mark" else "dropped"
    summary = (f"<p id=contamination-summary>{checked_text}checked against {names}: "
               f"{len(findings)} matched and were {action}.</p>")
    columns: list[str] = []  # in order of first appearance
    for finding in findings:
        columns += [k for k in finding if k not in columns]
    head = "".join(f"<th>{_e(c)}</th>" for c in columns)
    body = []
    for finding in findings[:500]:
        cells = []
        for column in columns:
            value = finding.get(column, "")
            if isinstance(value, float):
                value = f"{value:.3f}"
            cells.append(f"<td>{_e(value)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    more = f"<p>{len(findings) - 500} more in contamination.json</p>" if len(findings) > 500 \
        else ""
    return f"{summary}<table id=contamination><tr>{head}</tr>{''.join(body)}</table>{more}"


def render_html(data: ReportData, figures: list[RenderedFigure]) -> str:
    made = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    took = f", {data.total_seconds:.0f} s" if data.total_seconds else ""
    blocks = []
    for fig in figures:
        state = "empty" if fig.empty_reason else "data"
        caption = _e(fig.title) + (f" — {_e(fig.empty_reason)}" if fig.empty_reason else "")
        reason_attr = f' data-reason="{_e(fig.empty_reason)}"' if fig.empty_reason else ""
        encoded = base64.b64encode(fig.png).decode("ascii")
        blocks.append(f'<figure id="fig-{fig.name}" data-state="{state}"{reason_attr}>'
                      f'<img alt="{_e(fig.title)}" src="data:image/png;base64,{encoded}">'
                      f"<figcaption>{caption}</figcaption></figure>")
    dataset = data.build_dir / "dataset"
    grade = f"kernelmill grade {_e(dataset)} SUBMISSIONS.jsonl --split eval --out verdicts.jsonl"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>kernelmill build report</title>
<style>{CSS}</style></head><body>
<h1>kernelmill build report</h1>
<p class=sub>{_e(data.build_dir)} · validated on <b>{_e(data.device)}</b> · {made}{took}</p>
<h2>Counts</h2>
{_counts_table(data)}
{_missing_from_eval(data)}
<h2>Stages</h2>
{_stage_table(data)}
<h2>Figures</h2>
<div class=grid>
{chr(10).join(blocks)}
</div>
<h2>Validation checks</h2>
{_checks_table(data)}
<h2>Duplicate groups</h2>
{_dedup_table(data)}
<h2>Contamination</h2>
{_contamination_table(data)}
<h2>Use it</h2>
<p>Load: <code>datasets.load_dataset("{_e(dataset)}")</code></p>
<p>Grade: <code>{grade}</code></p>
</body></html>
"""


def write_report(build_dir: str | Path) -> Path:
    """Write ``report.html`` and ``figures/*.png`` into ``build_dir``; returns the page's path.

    Figures are drawn on matplotlib's Agg canvas directly (no pyplot, no display needed).
    """
    build_dir = Path(build_dir)
    data = load_report_data(build_dir)
    figures = render_figures(data)
    folder = build_dir / "figures"
    folder.mkdir(parents=True, exist_ok=True)
    for fig in figures:
        (folder / f"{fig.name}.png").write_bytes(fig.png)
    page = build_dir / "report.html"
    tmp = page.with_suffix(".html.tmp")
    tmp.write_text(render_html(data, figures), encoding="utf-8")
    tmp.replace(page)
    return page
