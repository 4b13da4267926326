"""`kernelmill build`: config, a real tiny CPU build end to end, reruns, and kill-then-resume."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kernelmill.app import cli
from kernelmill.app.config import DEFAULT_CONFIG, BuildConfig, load_config, parse_toml
from kernelmill.core.errors import KernelmillError
from kernelmill.app.build import run_build, selected_seeds
from kernelmill.app.stages import stages
from kernelmill.core.store import read_jsonl

from conftest import ROOT
STEP_NAMES = [step.name for step in stages()]


# -- config -----------------------------------------------------------------------------------

def test_shipped_config_documents_exactly_the_defaults():
    assert load_config(DEFAULT_CONFIG) == BuildConfig()
    text = DEFAULT_CONFIG.read_text()
    for name in BuildConfig.__dataclass_fields__:
        assert name in text, f"data/build.toml does not document {name}"


def test_n_defaults_by_device_and_flags_win_over_the_file(tmp_path):
    config = BuildConfig()
    assert config.n_for("cpu") == config.n_cpu < config.n_for("cuda") == config.n_gpu
    path = tmp_path / "b.toml"
    path.write_text('n = 5\nseed = 3\nagainst = ["a", "b"]\n[validate]\nmax_ablations = 4\n')
    config = load_config(path, seed=9, n=None)
    assert (config.n, config.seed, config.against) == (5, 9, ["a", "b"])
    assert config.validate == {"max_ablations": 4} and config.n_for("cuda") == 5


@pytest.mark.parametrize("text, message", [
    ('n = 4\nsed = 1\n', ":2: unknown key 'sed'"),
    ('n = "many"\n', ":1: n must be an integer"),
    ('keep_contaminated = 1\n', ":1: keep_contaminated must be true or false"),
    ('n = 4\nseed = \n', ":2: invalid TOML"),
    ('eval_fraction = 1.5\n', "eval_fraction must be between 0 and 1"),
    ('[validate]\nmax_ablation = 3\n', "[validate]: unknown validate setting(s): max_ablation"),
    ('[llm]\nmodel = "m"\nbogus = 1\n', "[llm]: "),
])
def test_bad_config_is_one_line_naming_file_and_line(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(KernelmillError) as err:
        load_config(path)
    assert message in str(err.value) and str(path) in str(err.value)
    assert "\n" not in str(err.value)


def test_cli_reports_a_bad_config_in_one_line(tmp_path, capsys):
    path = tmp_path / "bad.toml"
    path.write_text("workers = 0\n")
    assert cli.main(["build", "--config", str(path), "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"kernelmill: error: {path}: workers must be >= 1"]
    assert not (tmp_path / "b").exists()


def test_seed_selection_glob_and_limit(seeds_dir):
    config = BuildConfig(seeds_glob="conv*.py", seeds_limit=3)
    files = selected_seeds(config)
    assert [p.name for p in files] == sorted(p.name for p in seeds_dir.glob("conv*.py"))[:3]
    with pytest.raises(KernelmillError, match="no seed files match"):
        selected_seeds(BuildConfig(seeds_glob="nothing*.py"))
    assert parse_toml(DEFAULT_CONFIG)["seeds_glob"] == "*.py"


# -- a real build on the CPU ------------------------------------------------------------------

def _ids(path: Path) -> list[str]:
    return [row["id"] for row in read_jsonl(path)]


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _build_cli(config: Path, env_extra: dict | None = None) -> subprocess.Popen:
    """`kernelmill build --config FILE` in a child; it prints whether Ray was imported."""
    # Ctrl-C as in a terminal: a shell that starts the test run in the background (`&`) has
    # the children ignore SIGINT, and a Python started so never raises KeyboardInterrupt
    code = ("import signal, sys\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
            "from kernelmill.app.cli import main\n"
            "rc = main(sys.argv[1:])\nprint('RAY_IMPORTED', 'ray' in sys.modules)\n"
            "sys.exit(rc)\n")
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HOME": str(config.parent / "hf_home"),
           "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", **(env_extra or {})}
    return subprocess.Popen([sys.executable, "-c", code, "build", "--config", str(config)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            cwd=config.parent)


@pytest.fixture(scope="module")
def tiny_build(tmp_path_factory):
    """n=2 synthesized + 3 seeds, validated on the CPU, decontaminated against a renamed copy
    of one of the seeds."""
    root = tmp_path_factory.mktemp("tiny_build")
    seeds = selected_seeds(BuildConfig(seeds_limit=3))
    bench = root / "bench" / "level1"
    bench.mkdir(parents=True)
    copied = "# a benchmark's copy, reformatted\n" + seeds[1].read_text().replace("    ", "  ")
    (bench / "7_copy.py").write_text(copied)
    config = root / "tiny.toml"
    config.write_text(f'out = "{root / "out"}"\nn = 2\nseeds_limit = 3\ndevice = "cpu"\n'
                      f'workers = 2\nagainst = ["{bench}"]\n')
    proc = _build_cli(config)
    stdout, stderr = proc.communicate(timeout=400)
    assert proc.returncode == 0, stderr[-3000:]
    return {"dir": root / "out", "config": config, "stdout": stdout, "stderr": stderr,
            "bench_copy_of": seeds[1]}


def test_tiny_build_runs_every_stage_and_publishes(tiny_build):
    out = tiny_build["dir"]
    state = json.loads((out / "build_state.json").read_text())
    assert list(state["stages"]) == STEP_NAMES
    assert all(entry["finished"] for entry in state["stages"].values())
    counts = {name: entry["stats"]["counts"] for name, entry in state["stages"].items()}
    assert counts["import"]["kept"] == 3
    problems = _ids(out / "problems.jsonl")
    assert len(problems) == len(set(problems)) == counts["concat"]["kept"]
    assert len(problems) == 3 + counts["synth"].get("kept", 0) - \
        counts["concat"].get("dropped: same id as an earlier problem", 0)
    validated = _ids(out / "validated.jsonl")
    assert sorted(validated) == sorted(problems)
    passed = counts["filter"]
    assert passed.get("kept", 0) + sum(v for k, v in passed.items() if k.startswith("dropped")) \
        == len(problems)
    train, evals = _ids(out / "splits" / "train.jsonl"), _ids(out / "splits" / "eval.jsonl")
    assert not set(train) & set(evals) and len(train) + len(evals) >= 1
    assert set(train) | set(evals) <= set(_ids(out / "curated.jsonl")) <= set(problems)
    # the planted benchmark copy: caught and dropped when its seed made it to the split
    seed_ids = {row["id"] for row in read_jsonl(out / "seeds.jsonl")
                if Path(row["provenance"]["origin"]).name
                == tiny_build["bench_copy_of"].name}
    contamination = json.loads((out / "splits" / "contamination.json").read_text())
    if seed_ids & set(_ids(out / "curated.jsonl")):
        assert seed_ids <= {p["id"] for p in contamination["problems"]}
        assert not seed_ids & (set(train) | set(evals))

    import datasets

    loaded = datasets.load_dataset(str(out / "dataset"))
    assert sum(len(split) for split in loaded.values()) == len(train) + len(evals)


def test_tiny_build_prints_summary_and_never_imports_ray(tiny_build):
    stdout = tiny_build["stdout"]
    for stage in STEP_NAMES:
        assert stage in stdout
    assert "load_dataset" in stdout and "kernelmill grade --problems" in stdout
    assert "RAY_IMPORTED False" in stdout


def test_tiny_build_report_shows_every_figure(tiny_build):
    from test_report import check_report

    parsed = check_report(tiny_build["dir"])
    assert parsed.figures["funnel"]["attrs"]["data-state"] == "data"
    assert parsed.figures["categories"]["attrs"]["data-state"] == "data"
    assert "not measured on CPU" in parsed.figures["inductor_speedup"]["attrs"]["data-reason"]
    assert "not measured on CPU" in parsed.figures["roofline_headroom"]["attrs"]["data-reason"]


def test_rerun_skips_finished_stages_and_a_changed_option_reruns_only_its_stages(
        tiny_build, tmp_path):
    out = tmp_path / "copy"
    shutil.copytree(tiny_build["dir"], out)
    config = load_config(tiny_build["config"], out=str(out))
    before = {p.name: _sha(p) for p in out.glob("*.jsonl")}
    result = run_build(config)
    assert {r.step.name: r.status for r in result.results} == dict.fromkeys(STEP_NAMES,
                                                                            "up to date")
    assert {p.name: _sha(p) for p in out.glob("*.jsonl")} == before

    config = load_config(tiny_build["config"], out=str(out), eval_fraction=0.5)
    statuses = {r.step.name: r.status for r in run_build(config).results}
    assert [name for name, status in statuses.items() if status != "up to date"] == \
        ["split", "publish"]


# -- kill mid-validation, then resume ---------------------------------------------------------

def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True) if path.exists() else []


def _wait_for_lines(proc: subprocess.Popen, path: Path, at_least: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while len(_lines(path)) < at_least:
        if proc.poll() is not None:
            pytest.fail(f"build ended (rc {proc.returncode}) before {at_least} validated "
                        f"line(s): {proc.stderr.read()[-2000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"no {at_least} validated line(s) within {timeout}s")
        time.sleep(0.2)


def test_kill_mid_validation_then_rerun_finishes_without_redoing_or_duplicating(tmp_path):
    out = tmp_path / "out"
    config = tmp_path / "kill.toml"
    config.write_text(f'out = "{out}"\nn = 0\nseeds_limit = 4\ndevice = "cpu"\nworkers = 1\n')
    validated = out / "validated.jsonl"

    # Ctrl-C once the first problem is validated
    proc = _build_cli(config)
    _wait_for_lines(proc, validated, 1, timeout=180)
    proc.send_signal(signal.SIGINT)
    _stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr[-2000:]
    assert "rerun the same command to resume" in stderr
    state = json.loads((out / "build_state.json").read_text())
    assert state["stages"]["validate"]["finished"] is None  # killed mid-validation
    first = _lines(validated)
    assert 1 <= len(first) < 4

    # kill -TERM (no clean-up at all) once one more problem is validated
    proc = _build_cli(config)
    _wait_for_lines(proc, validated, len(first) + 1, timeout=180)
    proc.terminate()
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGTERM
    second = _lines(validated)
    assert second[:len(first)] == first

    if len(second) < 4:  # else the kill came after the last problem; the rerun still must finish
        state = json.loads((out / "build_state.json").read_text())
        assert state["stages"]["validate"]["finished"] is None

    proc = _build_cli(config)
    _stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr[-3000:]
    final = _lines(validated)
    assert final[:len(second)] == second  # finished problems were neither redone nor rewritten
    ids = _ids(validated)
    assert len(ids) == len(set(ids)) == 4
    assert sorted(ids) == sorted(_ids(out / "problems.jsonl"))
    state = json.loads((out / "build_state.json").read_text())
    counts = state["stages"]["validate"]["stats"]["counts"]
    assert counts.get("already validated", 0) == len(second)
    redone = sum(v for k, v in counts.items() if k == "kept" or k.startswith("dropped: "))
    assert redone == 4 - len(second)
    # what the stage's output holds, both runs' records: the build's table and report say 4
    from kernelmill.core.stats import StageStats

    assert StageStats.from_dict(state["stages"]["validate"]["stats"]).n_kept_all == 4
    assert "<td>validate</td><td class=n>4</td>" in (out / "report.html").read_text()
    assert state["stages"]["validate"]["status"] == "resumed"
    assert all(entry["finished"] for entry in state["stages"].values())
