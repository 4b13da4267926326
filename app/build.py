"""``kernelmill build``: every stage from the shipped seeds to a published dataset and a report.

The build is a list of steps (in the manner of datatrove's pipelines). Each step reads files under
the build folder, writes its own, and returns the ``StageStats`` of what it kept and dropped. The
build records every finished step in ``build_state.json`` (its stats, the fingerprint of its
inputs and the options it ran with) and skips it on a rerun unless one of those changed. A step
killed half-way is simply run again: per-record steps (synthesis, validation) append to their
resumable JSONL and skip what they finished; whole-file steps (dedup, cluster, split, publish)
are cheap and start over from a clean output.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kernelmill.core.devices import resolve_device
from kernelmill.core.errors import KernelmillError
from kernelmill.core.fingerprint import fingerprint, fingerprints, why_changed
from kernelmill.core.lock import BUILD_LOCK, locked
from kernelmill.core.stats import DONE_BEFORE, StageStats
from kernelmill.core.step import Step, add_options, build_key, result_options
from kernelmill.data import SEEDS_DIR
from kernelmill.splits.contamination import benchmark_path

from .config import DEFAULT_CONFIG, BuildConfig, load_config
from .report import write_report
from .stages import stages

log = logging.getLogger("kernelmill")

STATE_FILE = "build_state.json"
STATE_VERSION = 1


@dataclass
class StepResult:
    step: Step
    stats: StageStats
    status: str  # "ran", "resumed", "up to date"


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, sort_keys=True, default=str))


class Build:
    """The state of one build folder: its config, device, and which steps have finished."""

    def __init__(self, config: BuildConfig):
        self.config = config
        self.dir = Path(config.out)
        self.device = resolve_device(config.device)
        self.n = config.n_for(self.device)
        self.state_path = self.dir / STATE_FILE
        self.state = self._load_state()

    def path(self, name: str) -> Path:
        return self.dir / name

    # -- state ------------------------------------------------------------------------------
    def _load_state(self) -> dict[str, Any]:
        if not self.state_path.exists():
            return {"version": STATE_VERSION, "stages": {}}
        try:
            state = json.loads(self.state_path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            log.warning(f"{self.state_path}: unreadable ({exc}); every stage will be checked again")
            return {"version": STATE_VERSION, "stages": {}}
        if state.get("version") != STATE_VERSION or not isinstance(state.get("stages"), dict):
            return {"version": STATE_VERSION, "stages": {}}
        return state

    def save_state(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.state, indent=2, sort_keys=False) + "\n", encoding="utf-8")
        os.replace(tmp, self.state_path)  # atomic: a kill never leaves half a state file

    def _key(self, path: Path) -> str:
        try:  # relative to the build folder, so a moved build folder stays up to date
            return str(path.relative_to(self.dir))
        except ValueError:
            return str(path)

    def signature(self, step: Step) -> dict[str, Any]:
        return {"inputs": {self._key(p): fingerprint(p)["sha256"] if p.exists() else "missing"
                           for p in _fingerprinted_inputs(self, step)},
                "params": _jsonable(_params(self, step)),
                "outputs": fingerprints({step.output: self.path(step.output)})}

    def up_to_date(self, step: Step) -> bool:
        entry = self.state["stages"].get(step.name)
        if not entry or not entry.get("finished"):
            return False
        sig = self.signature(step)
        why = why_changed(entry.get("outputs"), sig["outputs"])  # same content, not just there
        if why:
            log.info(f"stage {step.name}: {why}; running it again")
            return False
        return entry.get("inputs") == sig["inputs"] and entry.get("params") == sig["params"]

    def stats_of(self, name: str) -> StageStats | None:
        entry = self.state["stages"].get(name)
        return StageStats.from_dict(entry["stats"]) if entry and entry.get("stats") else None

    # -- running ----------------------------------------------------------------------------
    def run_step(self, step: Step, force: bool = False) -> StepResult:
        if not force and self.up_to_date(step):
            return StepResult(step, self.stats_of(step.name), "up to date")  # type: ignore[arg-type]
        log.info(f"stage {step.name}: {step.title}")
        entry = self.state["stages"].get(step.name) or {}
        sig = self.signature(step)
        same_params = entry.get("params") == sig["params"]
        partial = self.path(step.output).exists()
        status = "ran"
        if partial and step.resumable and same_params:
            status = "resumed"
        elif partial:
            target = self.path(step.output)  # stale or half-written output of a whole-file step
            if target.is_dir():
                shutil.rmtree(target)
            elif target.exists():
                target.unlink()
        self.state["stages"][step.name] = {**sig, "finished": None,
                                           "started": _now(), "stats": entry.get("stats")}
        self.save_state()
        start = time.monotonic()
        try:
            config = step_config(self, step)
            step.check(config)
            stats = step.run(step_inputs(self, step), self.path(step.output), config)
        except ModuleNotFoundError as exc:
            if not (exc.name or "").startswith("kernelmill."):
                raise
            raise KernelmillError(f"stage {step.name} needs {exc.name}, which this installation "
                                  "lacks") from None
        stats.seconds = time.monotonic() - start
        self.state["stages"][step.name] = {**self.signature(step), "finished": _now(),
                                           "status": status, "stats": stats.to_dict()}
        self.state["device"] = self.device
        self.state["config"] = _jsonable(self.config.to_dict())
        self.save_state()
        return StepResult(step, stats, status)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


# -- the stages in a build folder ------------------------------------------------------------

def selected_seeds(config: BuildConfig) -> list[Path]:
    """The seed files the build uses: ``seeds_glob`` under the seeds folder, the first
    ``seeds_limit`` of them by name."""
    root = Path(config.seeds_dir) if config.seeds_dir else SEEDS_DIR
    if not root.is_dir():
        raise KernelmillError(f"{root}: seeds folder not found (seeds_dir)")
    files = sorted(p for p in root.glob(config.seeds_glob)
                   if p.is_file() and p.suffix == ".py" and p.name != "__init__.py")
    if config.seeds_limit:
        files = files[:config.seeds_limit]
    if not files:
        raise KernelmillError(f"{root}: no seed files match {config.seeds_glob!r}")
    return files


def seeds_folder(build: Build) -> Path:
    """The folder synthesis and import read: the seeds folder itself when every file of it is
    used, else a copy of the selection under the build folder."""
    files = selected_seeds(build.config)
    root = files[0].parent
    everything = sorted(p for p in root.glob("*.py") if p.name != "__init__.py")
    if files == everything and all(p.parent == root for p in files):
        return root
    folder = build.path("seed_files")
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    for path in files:
        shutil.copy2(path, folder / path.name)
    return folder


def step_config(build: Build, step: Step) -> Any:
    """The step's config in this build: each field from the build key its option names, then
    the values only the build knows (``step.build_values``)."""
    values = {}
    for f in dataclasses.fields(step.config):
        key = build_key(f)
        if key is not None and hasattr(build.config, key):
            values[f.name] = getattr(build.config, key)
    values.update(step.build_values(build))
    return step.config(**values)


def step_inputs(build: Build, step: Step) -> list[Path]:
    return [seeds_folder(build) if name == "@seeds" else build.path(name) for name in step.inputs]


def _fingerprinted_inputs(build: Build, step: Step) -> list[Path]:
    """What decides whether a finished step is still up to date: its input files (the selected
    seed files for the seeds folder) and the files its config names (``path`` options)."""
    paths = []
    for name in step.inputs:
        paths += selected_seeds(build.config) if name == "@seeds" else [build.path(name)]
    config = step_config(build, step)
    for f in dataclasses.fields(config):
        if f.metadata.get("path"):
            value = getattr(config, f.name) or []
            paths += [_named_path(v) for v in (value if isinstance(value, list) else [value])]
    return paths


def _named_path(value: Any) -> Path:
    """The file a path option names (``builtin:NAME``: the shipped file, so an upgraded one
    makes its stage run again)."""
    try:
        return benchmark_path(value)
    except KernelmillError:
        return Path(str(value))  # the stage itself reports the bad name


def _params(build: Build, step: Step) -> dict[str, Any]:
    return result_options(step_config(build, step))


def _count_lines(path: Path) -> int:
    if not path.exists():
        return 0
    with path.open("rb") as handle:
        return sum(1 for line in handle if line.strip())


@dataclass
class BuildResult:
    build: Build
    results: list[StepResult] = field(default_factory=list)
    report: Path | None = None
    seconds: float = 0.0


def run_build(config: BuildConfig, steps: tuple[Step, ...] | None = None,
              on_step: Callable[[StepResult], None] | None = None) -> BuildResult:
    """Run every step that is not up to date, in order; then write the report."""
    steps = stages() if steps is None else steps
    build = Build(config)
    for step in steps:  # fail before any stage runs (or the folder exists), not half-way through
        step.check(step_config(build, step))
    return _run_locked(build, steps, on_step)


@locked(lambda build, *_, **__: (build.dir / BUILD_LOCK, f"build folder {build.dir}"))
def _run_locked(build: Build, steps: tuple[Step, ...],
                on_step: Callable[[StepResult], None] | None) -> BuildResult:
    config = build.config
    build.dir.mkdir(parents=True, exist_ok=True)
    log.info(f"build in {build.dir} on {build.device}: {len(selected_seeds(config))} seed(s) "
             f"+ {build.n} synthesized problem(s)")
    result = BuildResult(build)
    start = time.monotonic()
    for step in steps:
        step_result = build.run_step(step)
        if step_result.status == "up to date":
            log.info(f"stage {step.name}: up to date, skipped")
        result.results.append(step_result)
        if on_step:
            on_step(step_result)
    if config.report:
        result.report = write_report(build.dir)
    result.seconds = time.monotonic() - start
    build.state["total_seconds"] = round(result.seconds, 3)
    build.save_state()
    return result


# -- the command ------------------------------------------------------------------------------

def summary_table(result: BuildResult):
    from rich.table import Table

    table = Table(title=f"kernelmill build: {result.build.dir}", title_justify="left")
    for column in ("stage", "kept", "dropped", "why dropped", "time", "note"):
        table.add_column(column, justify="right" if column in ("kept", "dropped", "time")
                         else "left")
    for item in result.results:
        stats = item.stats
        reasons = ", ".join(f"{reason} {n}" for reason, n in
                            sorted(stats.drop_reasons().items(), key=lambda kv: -kv[1]) if n)
        status = "" if item.status == "ran" else item.status
        before = stats.counts.get(DONE_BEFORE, 0)
        if before and item.status != "up to date":  # the output holds both runs' records
            status = f"{status}: {before} done before, {stats.n_kept} now".lstrip(": ")
        table.add_row(item.step.name, str(stats.n_kept_all), str(stats.n_dropped or ""),
                      reasons, f"{stats.seconds:.1f}s", status)
    return table


def _print_summary(result: BuildResult) -> None:
    from rich.console import Console

    console = Console()
    console.print(summary_table(result))
    out = result.build.dir
    dataset = out / "dataset"
    counts = {split: _count_lines(out / "splits" / f"{split}.jsonl") for split in ("train", "eval")}
    console.print(f"[bold]dataset[/bold]  {dataset}  ({counts['train']} train, "
                  f"{counts['eval']} eval) in {result.seconds:.0f}s", highlight=False)
    for line in next_steps(dataset, result.report):
        console.print(line, highlight=False, soft_wrap=True)


def next_steps(dataset: Path, report: Path | None) -> list[str]:
    """The lines after the build's table: how to load, grade and look at what it made."""
    lines = [f"  load it:   python -c \"import datasets; "
             f"print(datasets.load_dataset('{dataset}'))\"",
             f"  grade:     kernelmill grade --problems {dataset} --split eval "
             "--submissions SUBMISSIONS.jsonl --out verdicts.jsonl",
             f"  one row:   kernelmill show {dataset} PROBLEM_ID --out problem.py"]
    if report:
        lines.append(f"  report:    {report}")
    return lines


def _cmd_build(args: argparse.Namespace) -> int:
    overrides = {f.name: getattr(args, f.name, None) for f in dataclasses.fields(BuildConfig)}
    config = load_config(args.config, **overrides)
    try:
        result = run_build(config)
    except KeyboardInterrupt:
        if config.backend != "local":
            raise  # Ray's own exit handlers stop the local cluster it started
        # Everything finished is already on disk (writers flush per record). The local backend's
        # slot threads may still be inside a worker run; a normal interpreter shutdown can abort
        # in them (SIGABRT), so leave at once with Ctrl-C's status.
        print("kernelmill: interrupted; rerun the same command to resume", file=sys.stderr,
              flush=True)
        sys.stdout.flush()
        os._exit(130)
    _print_summary(result)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "build", help="the whole pipeline: seeds -> synth -> validate -> curate -> split -> "
                      "dataset + report.html",
        description="Import the seeds, synthesize N problems, validate them, keep those that "
                    "passed, dedup, cluster, split and publish a Hugging Face dataset folder, "
                    "then write report.html. Every stage writes under --out; rerunning the same "
                    "command resumes where it stopped. Defaults below are those of "
                    f"{DEFAULT_CONFIG}; a --config file overrides them and flags override both.")
    p.add_argument("--config", help="TOML file of build options (see data/build.toml)")
    add_options(p, BuildConfig)
    p.set_defaults(func=_cmd_build)
