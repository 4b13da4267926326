"""The Ray backend on a local CPU Ray: the map_unordered contract, retries, real validation, and
the per-GPU host layout on GPUs the local Ray declares (it hands out their ids like real ones)."""
from __future__ import annotations

import os
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest
from kernelmill.core.errors import KernelmillError
from kernelmill.core.interop import import_folder
from kernelmill.core.store import read_jsonl

ray = pytest.importorskip("ray", reason="the ray extra: pip install -e '.[ray]'")


@pytest.fixture(scope="module")
def local_ray():
    # the task functions below live in this test module: let Ray's workers import it by name,
    # as they import kernelmill's own task functions
    tests_dir = str(Path(__file__).resolve().parent)
    path = os.pathsep.join(p for p in (tests_dir, os.environ.get("PYTHONPATH")) if p)
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False,
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


def stay(item, slot):
    """Holds its slot a while, so items that share a host overlap in time."""
    start = time.monotonic()
    time.sleep(0.3)
    return {"pid": os.getpid(), "slot": slot, "start": start, "end": time.monotonic()}


def die_once_in_flight(item, slot):
    """Item 0 kills its host (and every item it is running) once; the rest just stay."""
    marker = Path(item["marker"])
    if item["value"] == 0 and not marker.exists():
        time.sleep(0.2)  # let the host's other items start first
        marker.write_text(str(os.getpid()))
        os._exit(1)
    return {**stay(item, slot), "value": item["value"]}


def most_at_once(spans):
    edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    now = best = 0
    for _, step in edges:
        now += step
        best = max(best, now)
    return best


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


def test_on_cuda_each_gpu_gets_one_host_process_running_its_slots(local_ray):
    from kernelmill.validate.ray_backend import RayBackend

    backend = RayBackend(device="cuda", per_host=3, running=2)
    assert backend.layout() == (2, 3)
    results = [r for _, r in backend.map_unordered(stay, range(12))]
    by_pid = defaultdict(list)
    for result in results:
        by_pid[result["pid"]].append(result)
    assert len(results) == 12 and len(by_pid) == 2  # one process per GPU, not one per item
    gpus = set()
    for runs in by_pid.values():
        slots = {(r["slot"]["gpu"], r["slot"]["env"]["CUDA_VISIBLE_DEVICES"], r["slot"]["running"],
                  r["slot"]["device"]) for r in runs}
        assert len(slots) == 1  # every item of a host sees its one GPU
        gpu, visible, running, device = slots.pop()
        assert (str(gpu), running, device) == (visible, 2, "cuda:0")
        gpus.add(gpu)
        assert 2 <= most_at_once([(r["start"], r["end"]) for r in runs]) <= 3
    assert gpus == {0, 1}


def test_a_killed_host_costs_its_items_a_rerun_not_the_run(local_ray, tmp_path):
    from kernelmill.validate.ray_backend import RayBackend

    marker = tmp_path / "host-died"
    items = [{"marker": str(marker), "value": v} for v in range(8)]
    results = {item["value"]: result for item, result in
               RayBackend(device="cuda", per_host=2, max_retries=2).map_unordered(
                   die_once_in_flight, items)}
    assert sorted(results) == list(range(8))
    assert all(result["value"] == value for value, result in results.items())
    assert int(marker.read_text()) != results[0]["pid"]  # item 0 ran again in a new host process


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
    assert str(err.value) == "the ray backend needs Ray: pip install -e '.[ray]'"


def test_build_with_ray_backend_but_no_ray_fails_before_any_stage(monkeypatch, tmp_path, capsys):
    from kernelmill.app import cli

    monkeypatch.setitem(sys.modules, "ray", None)
    out = tmp_path / "build"
    assert cli.main(["build", "--out", str(out), "--backend", "ray", "--n", "0"]) == 2
    assert capsys.readouterr().err.strip() == \
        "kernelmill: error: stage validate needs ray: pip install -e '.[ray]'"
    assert not out.exists()
