"""`kernelmill build` under faults: an output damaged after its stage finished is not up to date,
and a second build on the same folder fails at once naming the first."""
from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
import time

import pytest

from kernelmill.app.build import run_build
from kernelmill.app.config import load_config
from kernelmill.app.stages import stages

STEP_NAMES = [step.name for step in stages()]


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _config(tmp_path, out, seeds=4):
    path = tmp_path / "build.toml"
    path.write_text(f'out = "{out}"\nn = 0\nseeds_limit = {seeds}\ndevice = "cpu"\nworkers = 2\n'
                    "report = false\neval_fraction = 0.5\n")
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("faults")
    config = load_config(_config(root, root / "out"))
    run_build(config)
    return root, config


@pytest.mark.parametrize("damaged, stage", [("deduped.jsonl", "dedup"),
                                            ("curated.jsonl", "cluster")])
def test_an_output_cut_after_its_stage_finished_reruns_that_stage(built, damaged, stage, caplog):
    root, config = built
    out = root / "out"
    path = out / damaged
    whole = path.read_bytes()
    published = _sha(out / "splits" / "train.jsonl"), _sha(out / "splits" / "eval.jsonl")
    lines = whole.splitlines(keepends=True)
    assert len(lines) >= 2
    path.write_bytes(b"".join(lines[:-1]))  # one line cut, the file still there
    with caplog.at_level(logging.INFO, logger="kernelmill"):
        statuses = {r.step.name: r.status for r in run_build(config).results}
    ran = [name for name, status in statuses.items() if status != "up to date"]
    assert ran == [stage]  # its rerun wrote the same content: later stages stay up to date
    assert (f"stage {stage}: {damaged} changed since the stage finished ({len(lines) - 1} rows, "
            f"{len(lines)} when it finished); running it again") in caplog.text
    assert path.read_bytes() == whole
    assert (_sha(out / "splits" / "train.jsonl"), _sha(out / "splits" / "eval.jsonl")) == published


def test_a_published_dataset_edited_afterwards_is_published_again(built):
    root, config = built
    parquet = next((root / "out" / "dataset" / "data").glob("*.parquet"))
    whole = parquet.read_bytes()
    parquet.write_bytes(whole[: len(whole) // 2])
    statuses = {r.step.name: r.status for r in run_build(config).results}
    assert [name for name, status in statuses.items() if status != "up to date"] == ["publish"]
    assert parquet.read_bytes() == whole


def test_a_second_build_on_the_same_folder_fails_at_once_naming_the_first(tmp_path):
    out = tmp_path / "out"
    config = _config(tmp_path, out, seeds=40)  # a first build that is still validating
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf_home"), "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-m", "kernelmill.app.cli", "build", "--config", str(config)]
    first = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             env=env)
    try:
        deadline = time.monotonic() + 120
        while not (out / "build_state.json").exists() and time.monotonic() < deadline:
            assert first.poll() is None, "the first build ended early"
            time.sleep(0.1)
        start = time.monotonic()
        second = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
        waited = time.monotonic() - start
        assert first.poll() is None, "the first build finished before the second started"
    finally:
        first.kill()
        first.wait()
    assert second.returncode == 2
    assert second.stderr.strip() == (f"kernelmill: error: build folder {out} is in use by pid "
                                     f"{first.pid} (lock {out / '.kernelmill.lock'}); wait for "
                                     "it to finish or stop it, then rerun")
    assert waited < 30  # at once: it did not run (or wait for) any stage
    state = json.loads((out / "build_state.json").read_text())
    assert all(not entry.get("finished") or name in ("import", "mine", "synth", "concat")
               for name, entry in state["stages"].items())
