"""The probe run in-process on every defective fixture and on the shipped seeds.

Each file in tests/fixtures/problems_defective/ names the checks it must fail in an ``expect:`` line.
Fixtures that crash, hang or are malformed (``expect: runs``) go through real workers in
test_validate_runner.py; here the measurements and verdicts are checked without process costs.
"""
import re
from pathlib import Path

from conftest import FIXTURES

import pytest
from kernelmill.data import SEEDS_DIR
from kernelmill.synth.resize import shrink_for_cpu
from kernelmill.validate import checks as C
from kernelmill.validate.ablation import ablations
from kernelmill.validate.probe import probe_problem

DEFECTIVE = FIXTURES / "problems_defective"
SMALL = 32 * 1024  # elements per tensor: the checks behave the same, at an eighth of the cost


def expected_flags(path: Path) -> set[str]:
    match = re.search(r"^expect:\s*(.+)$", path.read_text(), re.MULTILINE)
    assert match, f"{path} lacks an expect: line"
    return {flag.strip() for flag in match.group(1).split(",")}


def expected_reasons(path: Path) -> list[tuple[str, str]]:
    """``reason: <check>: <text>`` lines: the failed check's detail must contain the text."""
    return [(m.group(1), m.group(2).strip())
            for m in re.finditer(r"^reason:\s*(\w+):\s*(.+)$", path.read_text(), re.MULTILINE)]


def probe(source: str) -> tuple[dict, dict]:
    m = probe_problem({"source": source, "device": "cpu", "seed": 0,
                       "ablations": ablations(source)})
    return m, C.judge(m)


RUNNABLE = sorted(p for p in DEFECTIVE.glob("*.py") if expected_flags(p) != {"runs"})


@pytest.mark.parametrize("path", RUNNABLE, ids=lambda p: p.stem)
def test_defective_problem_fails_its_check(path):
    _m, checks = probe(path.read_text())
    passed, flags = C.summarize(checks)
    assert not passed
    assert expected_flags(path) <= set(flags), (flags, {f: checks[f]["detail"] for f in flags})
    for name, text in expected_reasons(path):
        assert text in checks[name]["detail"], (name, checks[name]["detail"])
    # every verdict is a (passed, value, detail) triple with passed in {True, False, None}
    assert all(set(c) == {"passed", "value", "detail"} and c["passed"] in (True, False, None)
               for c in checks.values())


def test_every_check_has_a_defective_fixture():
    covered = set().union(*(expected_flags(p) for p in DEFECTIVE.glob("*.py")))
    gpu_only = {"runtime", "launch_overhead", "inductor", "roofline"}
    _m, checks = probe(shrink_for_cpu((SEEDS_DIR / "softmax_rows.py").read_text(), SMALL).source)
    assert set(checks) - gpu_only <= covered


def test_crash_raises_in_process():
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        probe((DEFECTIVE / "crash.py").read_text())


def one_seed_per_category() -> list[Path]:
    """The first seed of each category: healthy problems of every kind, at a CPU-test cost
    (all seeds are validated on the GPU: test_validate_gpu.py)."""
    chosen: dict[str, Path] = {}
    for path in sorted(SEEDS_DIR.glob("*.py")):
        match = re.search(r"^category:\s*(\w+)", path.read_text(), re.MULTILINE)
        chosen.setdefault(match.group(1) if match else "other", path)
    return sorted(chosen.values())


SEEDS = one_seed_per_category()


@pytest.mark.parametrize("path", SEEDS, ids=lambda p: p.stem)
def test_seed_passes_every_cpu_check(path):
    source = shrink_for_cpu(path.read_text(), SMALL).source
    m, checks = probe(source)
    passed, flags = C.summarize(checks)
    assert passed, {f: checks[f]["detail"] for f in flags}
    # measured, not skipped: the CPU-meaningful checks all ran
    for name in ("runs", "finite", "deterministic", "not_stochastic", "input_sensitive",
                 "not_near_zero", "no_dead_ops", "tolerance"):
        assert checks[name]["passed"] is True, (name, checks[name])
    assert checks["runtime"]["passed"] is None  # GPU-only
    assert m["aten_ops"] and m["flops"] is not None and m["bytes"] > 0
    assert m["tolerance"]["tol"] >= 1e-4 and m["probe_stats"]["outputs"]


def test_probe_is_reproducible_and_seeded():
    source = shrink_for_cpu((SEEDS_DIR / "layer_norm_wide.py").read_text(), SMALL).source
    a = probe_problem({"source": source, "device": "cpu", "seed": 0, "ablations": None})
    b = probe_problem({"source": source, "device": "cpu", "seed": 0, "ablations": None})
    c = probe_problem({"source": source, "device": "cpu", "seed": 7, "ablations": None})
    assert a["digest"]["sha256"] == b["digest"]["sha256"] != c["digest"]["sha256"]
    assert a["probe_stats"] == b["probe_stats"]
    # LayerNorm's weights start as ones/zeros for every seed: sensitivity comes from perturbing
    assert a["weight_sensitivity"]["fraction"] > 0.5
    assert "aten.native_layer_norm" in a["aten_ops"]


SCALED = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(64))

    def forward(self, x):
        return x * torch.sigmoid(self.w) + torch.relu(self.w)


def get_inputs():
    return [torch.randn(16, 64)]


def get_init_inputs():
    return []
"""


def test_nonlinear_weights_on_an_affine_input_path_are_not_inert():
    m, checks = probe(SCALED)
    # exactly a*x+b per channel, but the nonlinearities act on weights only: a real problem
    assert m["affine"][0]["channel"] < 1e-6
    assert m["input_nonaffine_ops"] == []
    assert checks["not_affine"]["passed"] is True
    m, checks = probe((DEFECTIVE / "relu_on_rand.py").read_text())
    assert m["input_nonaffine_ops"] == ["aten.relu"] and checks["not_affine"]["passed"] is False


def _recording_lock(held: list, log: list, handle=type(None)):
    """A ``GpuLock`` stand-in that logs each hold's kind, refuses nested holds and yields a
    ``handle()`` while held (``held``: the kinds held now)."""
    import contextlib

    class Recorder:
        def __init__(self, path):
            self.path = path

        @contextlib.contextmanager
        def _hold(self, kind):
            assert not held, f"{kind} taken inside {held}"
            held.append(kind)
            log.append(kind)
            try:
                yield handle()
            finally:
                held.pop()

        def shared(self):
            return self._hold("shared")

        def exclusive(self):
            return self._hold("exclusive")

    return Recorder


def test_probe_holds_the_gpu_lock_one_stage_at_a_time(monkeypatch):
    """Shared holds are short (one stage, one ablation), never nested, and the timing window is
    exclusive and outside them: a window waits for one stage to drain, not a whole probe."""
    from kernelmill.validate import probe as P
    from kernelmill.validate import replay as RP

    held: list[str] = []
    log: list[str] = []
    asides: list[str] = []

    class Handle:
        def let_window_in(self, on_wait=None):
            asides.append(held[-1])  # offered between forwards, only while held
            return False

    monkeypatch.setattr(P, "GpuLock", _recording_lock(held, log, Handle))
    monkeypatch.setattr(RP, "GpuLock", _recording_lock(held, log, Handle))
    source = shrink_for_cpu((SEEDS_DIR / "softmax_rows.py").read_text(), SMALL).source
    m = probe_problem({"source": source, "device": "cpu", "seed": 0, "lock": "x",
                       "ablations": ablations(source)})
    kinds = list(log)
    assert kinds.count("exclusive") == 1
    assert kinds.count("shared") >= 10 + m["ablation"]["tried"]
    # every forward inside a shared hold first offers the GPU to a waiting window
    assert len(asides) >= 10 and set(asides) == {"shared"}
    replay = RP.replay_problem({"source": source, "device": "cpu", "seed": 0, "lock": "x",
                                "time_eager": True})
    assert replay["timing"]["eager_ms"] > 0


def test_each_forward_is_prepared_beside_other_work_and_sampled_alone(monkeypatch):
    """The timing window holds the GPU alone only to size, warm and sample: the warm-up, the
    host time and the graph capture run under the lock held shared, one forward at a time."""
    import torch

    from kernelmill.validate import probe_device as PD
    from kernelmill.validate import timer as T

    held: list[str] = []
    log: list[str] = []
    Recorder = _recording_lock(held, log)
    real_prepare = T.Timer.prepare

    def prepare(timer):
        log.append(f"prepare under {held[-1] if held else 'nothing'}")
        return real_prepare(timer)

    monkeypatch.setattr(T.Timer, "prepare", prepare)
    monkeypatch.setattr(PD, "_mark", lambda stage: None)
    model, x = torch.nn.Linear(8, 8), torch.ones(4, 8)
    times = PD._timed_window(Recorder(None), "cpu", {"eager": (model, [x]),
                                                     "inductor": (model, [x])})
    assert log == ["shared", "prepare under shared", "exclusive"] * 2, log
    assert times["eager"]["ms"] > 0 and times["inductor"]["reps"] >= 5


def test_out_of_memory_while_building_on_the_gpu_is_raised_not_built_on_the_host():
    """Out of memory while a problem is built on the device is the parent's to judge (a rerun
    alone); building on the host instead once left a half-moved model whose forward failed
    with a device mismatch, a `runs` failure caused by other workers' memory."""
    from kernelmill.validate.forwards import _made_on

    calls = []

    def make():
        calls.append(1)
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

    with pytest.raises(RuntimeError, match="out of memory"):
        _made_on("cuda:0", make)
    assert calls == [1]  # not tried again on the host

    def host_only():  # a source that cannot build on the device still builds on the host
        calls.append(2)
        if len(calls) == 2:
            raise TypeError("a numpy generator")
        return []

    assert _made_on("cuda:0", host_only) == [] and calls == [1, 2, 2]


def test_a_model_built_on_the_host_is_moved_whole_to_the_device():
    """Built on the host (the device build raised), the model is moved with its inputs: its
    forward once met its own inputs on the GPU and its weights on the host (24 of 256 mined
    problems failed `runs` so on an H200)."""
    import torch

    from kernelmill.validate.forwards import _made_on

    built = _made_on("meta", lambda: torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3),
                                                         torch.nn.BatchNorm2d(4)))
    assert {t.device.type for t in built.state_dict().values()} == {"meta"}


INERT_AND_DEAD = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(256, 256)
        self.drop = nn.Dropout(p=0.0)

    def forward(self, x):
        y = self.drop(self.lin(x))
        return torch.tanh(y) + torch.relu(x.abs())


def get_inputs():
    return [torch.randn(64, 256)]


def get_init_inputs():
    return []
'''


def test_an_ablation_that_removes_no_compute_is_not_a_dead_op():
    """Dropout in eval mode runs no kernel: taking it out changes nothing a kernel could skip,
    so it is reported apart; ReLU on non-negative values runs one and is dead."""
    from kernelmill.validate.runner import validate_source

    check = validate_source(INERT_AND_DEAD, config={"cross_process": False})["checks"][
        "no_dead_ops"]
    assert check["value"] == ["line 14: `torch.relu(x.abs())` -> `x.abs()`"], check
    inert = check["detail"].split("computing nothing, not counted: ")[1]
    assert "self.drop(" in inert and "relu" not in inert
