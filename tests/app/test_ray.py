"""The Ray backend on a local CPU Ray: the map_unordered contract, retries, real validation."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from kernelmill.core.errors import KernelmillError
from kernelmill.core.interop import import_folder
from kernelmill.core.store import read_jsonl

ray = pytest.importorskip("ray", reason="the ray extra: pip install 'kernelmill[ray]'")


@pytest.fixture(scope="module")
def local_ray():
    # the task functions below live in this test module: let Ray's workers import it by name,
    # as they import kernelmill's own task functions
    tests_dir = str(Path(__file__).resolve().parent)
    path = os.pathsep.join(p for p in (tests_dir, os.environ.get("PYTHONPATH")) if p)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": path}})
    yield ray
    ray.shutdown()


# Task functions: module level, so Ray pickles them by reference.
def describe(item, slot):
    return {"square": item * item, "device": slot["device"], "gpu": slot["gpu"],
            "pid": os.getpid()}


def die_once(item, slot):
    """Kills its own worker process the first time it sees ``item``; succeeds when retried."""
    marker = Path(item["marker"])
    if not marker.exists():
        marker.write_text(str(os.getpid()))
        os._exit(1)
    return {"value": item["value"], "pid": os.getpid()}


def refuse(item, slot):
    raise ValueError(f"cannot handle {item}")


def test_map_unordered_yields_every_item_once_from_ray_workers(local_ray):
    from kernelmill.validate.backends import get_backend

    backend = get_backend("ray", device="cpu", workers=2)
    results = list(backend.map_unordered(describe, range(7)))
    assert sorted(item for item, _ in results) == list(range(7))
    assert all(result["square"] == item * item for item, result in results)
    assert {result["device"] for _, result in results} == {"cpu"}
    assert {result["gpu"] for _, result in results} == {None}
    assert os.getpid() not in {result["pid"] for _, result in results}
    assert list(backend.map_unordered(describe, [])) == []


def test_a_task_whose_worker_dies_is_retried(local_ray, tmp_path):
    from kernelmill.validate.ray_backend import RayBackend

    marker = tmp_path / "died-once"
    items = [{"marker": str(marker), "value": 1}, {"marker": str(tmp_path / "other"), "value": 2}]
    results = {item["value"]: result for item, result in
               RayBackend(device="cpu", max_retries=2).map_unordered(die_once, items)}
    assert sorted(results) == [1, 2]
    assert int(marker.read_text()) != results[1]["pid"]  # the retry ran in a new worker


def test_a_worker_lost_more_often_than_max_retries_is_one_line_error(local_ray, tmp_path):
    from kernelmill.validate.ray_backend import RayBackend

    with pytest.raises(KernelmillError, match="lost its worker 1 times"):
        list(RayBackend(device="cpu", max_retries=0).map_unordered(
            die_once, [{"marker": str(tmp_path / "m"), "value": 1}]))


def test_an_exception_in_the_task_reaches_the_caller_unretried(local_ray):
    from kernelmill.validate.ray_backend import RayBackend

    with pytest.raises(ValueError, match="cannot handle"):
        list(RayBackend(device="cpu").map_unordered(refuse, [1]))


def test_validation_through_ray_matches_the_contract(local_ray, tmp_path, seeds_dir):
    from kernelmill.validate.runner import validate_file

    seeds = sorted(seeds_dir.glob("*.py"))[:2]
    folder = tmp_path / "seeds"
    folder.mkdir()
    for path in seeds:
        (folder / path.name).write_text(path.read_text())
    problems = tmp_path / "problems.jsonl"
    import_folder(folder, problems)
    out = tmp_path / "validated.jsonl"
    stats = validate_file(problems, out, device="cpu", backend="ray", workers=2, progress=False)
    rows = list(read_jsonl(out))
    assert sorted(r["id"] for r in rows) == sorted(r["id"] for r in read_jsonl(problems))
    assert all(r["validation"]["device"] == "cpu" for r in rows)
    assert stats.n_kept + stats.n_dropped == 2
    assert stats.n_kept == sum(1 for r in rows if r["validation"]["passed"])
    again = validate_file(problems, out, device="cpu", backend="ray", progress=False)
    assert again.counts["already validated"] == 2 and again.n_kept == 0


def test_missing_ray_is_a_one_line_install_hint(monkeypatch):
    from kernelmill.validate import ray_backend

    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(KernelmillError) as err:
        ray_backend.RayBackend(device="cpu")
    assert str(err.value) == "the ray backend needs Ray: pip install 'kernelmill[ray]'"


def test_build_with_ray_backend_but_no_ray_fails_before_any_stage(monkeypatch, tmp_path, capsys):
    from kernelmill.app import cli

    monkeypatch.setitem(sys.modules, "ray", None)
    out = tmp_path / "build"
    assert cli.main(["build", "--out", str(out), "--backend", "ray", "--n", "0"]) == 2
    assert capsys.readouterr().err.strip() == \
        "kernelmill: error: stage validate needs ray: pip install 'kernelmill[ray]'"
    assert not out.exists()
