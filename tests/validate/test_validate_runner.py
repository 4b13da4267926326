"""validate_file and ``kernelmill validate`` through real workers: crashes, hangs, resume."""
import json
from pathlib import Path

from conftest import FIXTURES, run_cli
from kernelmill.core.record import Record
from kernelmill.data import SEEDS_DIR
from kernelmill.validate.runner import validate_file

DEFECTIVE = FIXTURES / "problems_defective"
SCHEMA = {"device", "torch", "dtype", "checks", "passed", "flags", "eager_ms", "inductor_ms",
          "inductor_speedup", "flops", "bytes", "roofline_ms", "headroom", "atol", "rtol",
          "difficulty", "aten_ops", "probe_stats", "resized"}


def record_line(path: Path) -> str:
    return json.dumps(Record.from_source(path.read_text(), name=path.stem).to_dict())


def strict_json(line: str) -> dict:
    def reject(constant):
        raise ValueError(f"non-standard JSON constant {constant}")

    return json.loads(line, parse_constant=reject)


def read_out(path: Path) -> dict[str, dict]:
    return {r["name"]: r for r in map(strict_json, path.read_text().splitlines())}


def test_validate_file_survives_crashes_and_malformed_input(tmp_path):
    names = ["crash", "no_init_inputs", "dropout_training"]
    lines = [record_line(DEFECTIVE / f"{n}.py") for n in names]
    lines += [record_line(SEEDS_DIR / "softmax_rows.py"), "{not json", lines[0]]
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out.jsonl"
    stats = validate_file(src, out, device="cpu", workers=2,
                          config={"timeout_s": 180, "cpu_max_numel": 32768}, progress=False)
    records = read_out(out)
    assert sorted(records) == sorted(names + ["softmax_rows"])  # every record, once
    assert stats.counts["corrupt input"] == 1
    # validation enriches: every record is kept, pass or fail (the filter step drops failures)
    assert stats.n_kept == 4 and stats.n_dropped == 0
    assert (stats.counts["passed"], stats.counts["failed runs"],
            stats.counts["failed not_stochastic"]) == (1, 2, 1)

    v = {name: r["validation"] for name, r in records.items()}
    assert all(SCHEMA <= set(x) for x in v.values())
    assert "forward: RuntimeError" in v["crash"]["checks"]["runs"]["detail"]
    assert "cannot be multiplied" in v["crash"]["checks"]["runs"]["detail"]
    assert "static check" in v["no_init_inputs"]["checks"]["runs"]["detail"]
    assert all(v[n]["passed"] is False and v[n]["flags"] == ["runs"] for n in names[:2])
    assert v["dropout_training"]["flags"] == ["not_stochastic"]

    seed = v["softmax_rows"]
    assert seed["passed"] is True and seed["flags"] == []
    assert 0 < seed["resized"] < 1  # shrunk for the CPU
    assert "in-process rebuild" in seed["checks"]["deterministic"]["detail"]
    for gpu_only in ("runtime", "launch_overhead", "roofline", "inductor"):
        assert seed["checks"][gpu_only]["passed"] is None
    assert seed["atol"] == seed["rtol"] >= 1e-4
    assert seed["aten_ops"] == ["aten._softmax"]
    assert seed["difficulty"]["tier"] in ("easy", "medium", "hard")
    assert seed["eager_ms"] > 0 and seed["flops"] is not None
    # the grading distributions it stays stable under, for the grader (grade.policy)
    assert set(seed["distributions"]) == {"natural", "affine", "scaled"}
    assert all(d["supported"] and d["finite"] for d in seed["distributions"].values())


def test_a_hanging_problem_times_out_with_a_failed_record():
    from kernelmill.validate.runner import validate_source

    v = validate_source((DEFECTIVE / "hang.py").read_text(), None, {"timeout_s": 8})
    assert v["passed"] is False and v["flags"] == ["runs"]
    assert "timed out after 8s" in v["checks"]["runs"]["detail"]


def test_cli_validate_resumes_and_reports_corrupt_lines(tmp_path):
    src = tmp_path / "in.jsonl"
    out = tmp_path / "out.jsonl"
    first = record_line(DEFECTIVE / "relu_on_rand.py")
    src.write_text(first + "\n{\"id\": 3\n")
    result = run_cli("validate", str(src), "--out", str(out), "--device", "cpu",
                     "--workers", "1", "--max-ablations", "4", "--cpu-max-numel", "32768")
    assert result.returncode == 0, result.stderr
    assert "in.jsonl:2: corrupt or truncated line" in result.stderr
    assert "1 kept" in result.stdout and "1 failed not_affine" in result.stdout
    assert read_out(out)["relu_on_rand"]["validation"]["flags"] == ["not_affine", "no_dead_ops"]

    with src.open("a") as handle:  # a second problem arrives; the first is not redone, and
        # counted once though its line comes twice
        handle.write(record_line(SEEDS_DIR / "softmax_rows.py") + "\n" + first + "\n")
    result = run_cli("validate", str(src), "--out", str(out), "--device", "cpu",
                     "--max-ablations", "4", "--cpu-max-numel", "32768")  # the same options
    assert result.returncode == 0, result.stderr
    assert "resuming" in result.stderr
    assert "1 already validated" in result.stdout and "1 kept" in result.stdout
    assert sorted(read_out(out)) == ["relu_on_rand", "softmax_rows"]
    assert len(out.read_text().splitlines()) == 2

    bad = run_cli("validate", str(tmp_path / "missing.jsonl"), "--out", str(out))
    assert bad.returncode == 2 and "no such file" in bad.stderr
    no_gpu = run_cli("validate", str(src), "--out", str(out), "--device", "cuda")
    assert no_gpu.returncode == 2 and "no CUDA device" in no_gpu.stderr


HEALTHY = '''"""Scaled GELU of a sum.

category: fused
level: 2
"""
import torch
import torch.nn as nn

N = 256


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(N))

    def forward(self, x, y):
        return torch.nn.functional.gelu(x + y) * self.scale


def get_inputs():
    return [torch.randn(16, N), torch.randn(16, N)]


def get_init_inputs():
    return []
'''


def test_second_worker_checks_determinism_and_inductor_on_cpu():
    """The CUDA-default path (second worker, TorchInductor), forced on for the CPU."""
    from kernelmill.validate.runner import validate_source

    v = validate_source(HEALTHY, None, {"cross_process": True, "inductor": True,
                                        "timeout_s": 240, "cpu_max_numel": 32768})
    assert v["passed"], v["flags"]
    assert "across 2 workers: bitwise" in v["checks"]["deterministic"]["detail"]
    assert v["checks"]["inductor"]["passed"] is True
    assert v["inductor_ms"] > 0 and v["inductor_speedup"] == v["checks"]["inductor"]["value"] > 0
    # eager was timed by the second worker, in the same window as the compiled forward
    timed = {k: s for k, s in v["profile"].items() if k.startswith("replay.timing ")}
    assert v["eager_ms"] > 0 and sum(timed.values()) > 0  # per forward and phase
    assert {"replay.timing eager samples", "replay.timing inductor samples"} <= set(timed)
    assert not any(k.startswith("probe.timing") for k in v["profile"])
    assert v["checks"]["weight_sensitive"]["passed"] is True


def test_gpu_lock_timing_excludes_everyone(tmp_path):
    import threading
    import time

    from kernelmill.validate.probe import GpuLock

    lock = GpuLock(str(tmp_path / "gpu0"))
    events = []

    def reader(tag):
        with lock.shared():
            events.append(("in", tag))
            time.sleep(0.2)
            events.append(("out", tag))

    with lock.exclusive():
        threads = [threading.Thread(target=reader, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        time.sleep(0.3)
        assert events == []  # readers wait while a timing run holds the GPU
    for t in threads:
        t.join()
    # both readers then ran together (shared), not one after the other
    assert [e[0] for e in events] == ["in", "in", "out", "out"]
    with lock.shared(), GpuLock(None).exclusive():  # no path: no locking at all
        pass


def test_records_hold_strict_json():
    from kernelmill.validate.runner import _finite

    v = _finite({"a": float("inf"), "b": [1.0, float("nan")], "c": {"d": (2, -float("inf"))}})
    assert v == {"a": None, "b": [1.0, None], "c": {"d": [2, None]}}
    json.dumps(v, allow_nan=False)


def test_a_problem_the_first_worker_failed_gets_no_second_worker():
    """Cheap checks first: no Inductor compile, no timing window for a problem already failed;
    the checks only the second worker could run say why they did not."""
    from kernelmill.validate.runner import validate_source

    source = (DEFECTIVE / "input_unused.py").read_text()
    v = validate_source(source, None, {"cross_process": True, "inductor": True,
                                       "timeout_s": 240})
    assert not v["passed"] and "input_sensitive" in v["flags"]
    assert v["checks"]["inductor"]["passed"] is None
    assert "not run: failed input_sensitive" in v["checks"]["inductor"]["detail"]
    assert "cross-process check not run" in v["checks"]["deterministic"]["detail"]
    assert not any(k.startswith("replay.") for k in v["profile"])
    assert v["profile"]["probe.wall"] >= v["profile"]["probe.ablation"] > 0
    # the same problem without early exit runs the second worker
    full = validate_source(source, None, {"cross_process": True, "inductor": False,
                                          "early_exit": False, "timeout_s": 240})
    assert full["profile"]["replay.wall"] > 0
    assert "across 2 workers" in full["checks"]["deterministic"]["detail"]


def test_workers_running_on_one_gpu_are_bounded_by_its_slot():
    """A GPU gets twice as many slots as workers may run on it (slots waiting for memory do
    not starve the others); ``_running`` holds the running ones to the bound."""
    import threading
    import time

    from kernelmill.validate.runner import _running

    slot = {"device": "cuda:0", "gpu": 7, "running": 2}
    inside, most = [0], [0]
    lock = threading.Lock()

    def work():
        with _running(slot):
            with lock:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
            time.sleep(0.1)
            with lock:
                inside[0] -= 1

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most[0] == 2
    with _running({"device": "cpu", "gpu": None}):  # CPU slots: no bound beyond the slots
        pass


FIXED_GRID = '''import torch
import torch.nn as nn

GRID = 64
BATCH = 2


class Model(nn.Module):
    def __init__(self, grid):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(64, 64))  # a fixed grid, as a patch embedding's

    def forward(self, x):
        assert x.shape[-1] == self.weight.shape[0], "input size doesn't match model"
        return torch.tanh(x @ self.weight)


def get_inputs():
    return [torch.randn(BATCH, GRID, GRID)]


def get_init_inputs():
    return [GRID]
'''


def test_a_problem_its_cpu_sizes_break_runs_at_its_declared_sizes():
    """Shrunk for the CPU, the fixed grid's assertion fails; the declared sizes then run."""
    from kernelmill.validate.one_problem import validate_source

    v = validate_source(FIXED_GRID, None, {"timeout_s": 120, "cpu_max_numel": 4096})
    runs = v["checks"]["runs"]
    assert runs["passed"] is True and v["resized"] is None, runs
    assert "shrunk for the CPU it failed" in runs["detail"]
    assert "doesn't match model" in runs["detail"]
    # grading on CPU takes the size validation ran it at, not a fresh shrink
    from kernelmill.grade.size import grading_size

    assert grading_size(FIXED_GRID, "cpu", {"validation": v}, 4096).source == FIXED_GRID
    assert grading_size(FIXED_GRID, "cpu", None, 4096).source != FIXED_GRID
