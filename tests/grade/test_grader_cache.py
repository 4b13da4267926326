"""The reference's Inductor timing is measured once per source, GPU model and library versions,
then read from disk by every grader, however many write it at once."""
from __future__ import annotations

import threading
from types import SimpleNamespace

from kernelmill.grade import reference_run, reference_sizes
from kernelmill.grade.grader import Grader
from kernelmill.grade.policy import Policy

SOURCE = "class Model: pass\n"


def _grader(tmp_path, monkeypatch, runs: list, timing: dict | None = None) -> Grader:
    for module in (reference_run, reference_sizes):  # the caches' keys, and the readings'
        monkeypatch.setattr(module, "gpu_name", lambda device, env=None: "Test GPU 80GB")
    grader = Grader("cpu", cache_root=str(tmp_path), policy=Policy(timing_settings=timing or {}))

    def measured(source, slot_env=None, timed=True, **kwargs):
        runs.append(source)
        return SimpleNamespace(value={"eager": {"ms": 2.0}, "inductor": {"ms": 1.0},
                                      "trials": ["not cached"]})

    monkeypatch.setattr(grader, "_run_reference", measured)  # the timed run
    return grader


def test_timing_is_measured_once_and_read_back_by_a_new_grader(tmp_path, monkeypatch):
    runs: list = []
    first = _grader(tmp_path, monkeypatch, runs).inductor_timing(SOURCE)
    assert first == {"eager": {"ms": 2.0}, "inductor": {"ms": 1.0}} and len(runs) == 1
    again = _grader(tmp_path, monkeypatch, runs).inductor_timing(SOURCE)
    assert again == first and len(runs) == 1  # from disk
    other = _grader(tmp_path, monkeypatch, runs).inductor_timing(SOURCE + "# changed\n")
    assert other == first and len(runs) == 2  # another source is measured


def test_concurrent_graders_write_one_whole_file(tmp_path, monkeypatch):
    runs: list = []
    grader = _grader(tmp_path, monkeypatch, runs)
    results, errors = [], []

    def work():
        try:
            results.append(grader.inductor_timing(SOURCE))
        except Exception as exc:  # noqa: BLE001 — collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and len(results) == 16
    files = sorted(p.name for p in (tmp_path / "reference-timing").iterdir())
    assert len(files) == 1 and files[0].endswith(".json"), files  # no temporary file left


def test_window_settings_share_the_timing_and_timer_settings_do_not(tmp_path, monkeypatch):
    """A window's own knobs (settling, round length, its CI target) never reach the reference's
    Inductor timing, which is measured outside any window: changing them reads the cache. A
    timer option (sample length) changes that measurement: it is measured again."""
    runs: list = []
    _grader(tmp_path, monkeypatch, runs).inductor_timing(SOURCE)
    window = {"settle_ms": 20.0, "round_ms": 30.0, "ci_target_pct": 1.0, "min_reps": 8,
              "cover": "sleep"}
    _grader(tmp_path, monkeypatch, runs, window).inductor_timing(SOURCE)
    assert len(runs) == 1  # read back
    _grader(tmp_path, monkeypatch, runs, {**window, "sample_ms": 5.0}).inductor_timing(SOURCE)
    assert len(runs) == 2
