"""The reference's Inductor timing is measured once per source, GPU model and library versions,
then read from disk by every grader, however many write it at once."""
from __future__ import annotations

import threading
from types import SimpleNamespace

from kernelmill.grade import reference_run
from kernelmill.grade.grader import Grader

SOURCE = "class Model: pass\n"


def _grader(tmp_path, monkeypatch, runs: list) -> Grader:
    monkeypatch.setattr(reference_run, "gpu_name", lambda device, env=None: "Test GPU 80GB")
    grader = Grader("cpu", cache_root=str(tmp_path))

    def measured(source, slot_env=None):
        runs.append(source)
        return SimpleNamespace(value={"eager": {"ms": 2.0}, "inductor": {"ms": 1.0},
                                      "trials": ["not cached"]})

    monkeypatch.setattr(grader, "reference", measured)
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
