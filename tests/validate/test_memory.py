"""The meta-device memory estimate against what real CPU tensors keep alive."""
from pathlib import Path

import pytest
import torch
from conftest import ROOT
from kernelmill.data import SEEDS_DIR
from kernelmill.synth.resize import shrink_for_cpu
from kernelmill.validate import memory as MM
from kernelmill.validate import probe as P
from kernelmill.validate.measure import load_namespace
from kernelmill.validate.runner import validate_source

KERNELBENCH = ROOT.parent / "shared" / "benchmarks" / "kernelbench"
SEEDS = ["rms_norm", "swiglu_feed_forward", "softmax_rows", "transformer_encoder_block",
         "conv_transpose3d_softmax_scale"]


def small(path: Path) -> str:
    return shrink_for_cpu(path.read_text(), max_numel=1 << 15).source


# KernelBench files at CPU-friendly sizes, set by hand (not by the resizer's factor)
KB_SIZES = {"level1/23_Softmax.py": {"batch_size = 4096": "batch_size = 16",
                                     "dim = 393216": "dim = 1000"},
            "level2/1_Conv2D_ReLU_BiasAdd.py": {"batch_size = 128": "batch_size = 2",
                                                "height = width = 128": "height = width = 20"},
            "level3/1_MLP.py": {"16384": "96", "8192": "40"}}


def sources() -> list[tuple[str, str]]:
    found = [(name, small(SEEDS_DIR / f"{name}.py")) for name in SEEDS]
    for rel, edits in KB_SIZES.items():
        path = KERNELBENCH / rel
        if path.exists():
            text = path.read_text()
            for old, new in edits.items():
                assert old in text, (rel, old)
                text = text.replace(old, new)
            found.append((rel, text))
    return found


@pytest.mark.parametrize(("name", "source"), sources(), ids=lambda v: v[:40])
def test_meta_estimate_equals_live_bytes_of_a_real_cpu_forward(name, source):
    est = MM.estimate_problem({"source": source})
    assert est["method"] == "meta", est
    real = MM.measure_forward(load_namespace(source, "real"), 0, "cpu")
    for key in ("params_bytes", "inputs_bytes", "outputs_bytes"):
        assert est[key] == real[key], (key, est[key], real[key])
    # equal, except where CPU runs a fused kernel (attention) that meta runs decomposed
    assert real["forward_peak_bytes"] <= est["forward_peak_bytes"] \
        <= 1.5 * real["forward_peak_bytes"], (est, real)
    assert est["forward_peak_bytes"] >= est["inputs_bytes"] + est["params_bytes"] > 0


@pytest.mark.parametrize("name", ["rms_norm", "softmax_rows", "swiglu_feed_forward"])
def test_probe_estimate_bounds_the_real_probe_peak(name):
    source = small(SEEDS_DIR / f"{name}.py")
    est = MM.estimate_problem({"source": source})
    mode = MM.LiveBytes()
    with mode:
        P.probe_problem({"source": source, "device": "cpu", "time": False, "ablations": None})
    bound = MM.probe_bytes(est) - MM.CONTEXT_BYTES
    assert mode.peak <= bound <= 3 * mode.peak, (mode.peak, bound)
    assert MM.minimum_bytes(est) < mode.peak  # the probe holds more than one forward


def test_live_bytes_counts_views_once_and_releases_freed_tensors():
    mode = MM.LiveBytes()
    with mode:
        a = torch.empty(1000, dtype=torch.float32)
        view = a[10:20]
        b = torch.empty(500, dtype=torch.float64)
        assert mode.live == 4000 + 4000
        del b
        assert mode.live == 4000
        del a
        assert mode.live == 4000  # the view keeps the storage alive
        del view
    assert mode.live == 0 and mode.peak == 8000


BIG = """
import torch
import torch.nn as nn
class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.proj = nn.Linear(n, n)
    def forward(self, x):
        return torch.softmax(self.proj(x), dim=-1) * x
batch_size = 1 << 17
n = 1 << 14
def get_inputs():
    return [torch.randn(batch_size, n)]
def get_init_inputs():
    return [n]
"""


def test_estimate_sees_large_sizes_without_allocating_them():
    est = MM.estimate_problem({"source": BIG})
    assert est["method"] == "meta"
    assert est["inputs_bytes"] == (1 << 31) * 4  # 8 GiB of input, never allocated
    assert est["params_bytes"] == ((1 << 28) + (1 << 14)) * 4
    assert est["forward_peak_bytes"] >= est["inputs_bytes"] * 2


ELEMENTWISE = """
import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, x):
        FORWARD
def get_inputs():
    return [torch.randn(1024, 1024)]
def get_init_inputs():
    return []
"""
WRITES = {"return torch.relu(x)": False, "return x.mul_(2).relu()": True,
          "return torch.add(x, 1, out=x)": True, "x.view(-1)[:8] = 0\n        return x * 2": True,
          "y = x.clone()\n        y.mul_(2)\n        return y": False}


@pytest.mark.parametrize(("forward", "writes"), WRITES.items(), ids=lambda v: str(v)[:20])
def test_the_estimate_and_the_probe_agree_on_whether_the_forward_writes_its_inputs(forward,
                                                                                  writes):
    source = ELEMENTWISE.replace("FORWARD", forward)
    est = MM.estimate_problem({"source": source})
    assert est["method"] == "meta" and est["mutates_inputs"] is writes
    m = P.probe_problem({"source": source, "device": "cpu", "time": False, "ablations": None})
    assert bool(m["mutated_inputs"]) is writes
    # a forward given fresh inputs each time is deterministic whether or not it writes them
    assert m["deterministic"]["bitwise"] and "redraw_differs" not in m


def test_a_forward_that_leaves_its_inputs_alone_runs_on_them_without_copies(monkeypatch):
    """The probe's peak for one elementwise input, in inputs' worth: the output, a second
    output, the alt draw and its output at most (the fp64 stage keeps the output, smaller than
    ``REMAKE_BYTES`` here, beside two fp64 tensors: five; a grading distribution keeps it beside
    its fp64 output and a scaled draw's fp32 forward: five too). It held seven and a half when
    every forward had copies."""
    monkeypatch.setattr(P.C, "CHUNK", 1 << 12)  # the checks' fixed-size blocks, out of the way
    source = ELEMENTWISE.replace("FORWARD", "return torch.relu(x)")
    inputs_bytes = 1024 * 1024 * 4
    mode = MM.LiveBytes()
    with mode:
        m = P.probe_problem({"source": source, "device": "cpu", "time": False, "ablations": None})
    assert not m["mutated_inputs"]
    assert mode.peak <= 5.1 * inputs_bytes, mode.peak / inputs_bytes
    est = MM.estimate_problem({"source": source})
    assert mode.peak <= MM.probe_bytes(est, 0)
    # KernelBench's level-1 sizes (6 GiB in, 6 GiB out): four inputs' worth and the checks'
    # blocks (the output is made again after the fp64 forward); eight and a half before
    giant = dict(est, inputs_bytes=6 << 30, outputs_bytes=6 << 30, forward_peak_bytes=12 << 30)
    assert MM.probe_bytes(giant, 0) == 4 * (6 << 30) + 8 * MM.STAT_BLOCK_BYTES


def test_inputs_that_do_not_come_back_from_their_seed_are_said_to_differ():
    source = ELEMENTWISE.replace("FORWARD", "return torch.relu(x)").replace(
        "torch.randn(1024, 1024)", "torch.randn(64, 64, generator=torch.Generator().manual_seed("
        "int.from_bytes(__import__('os').urandom(7), 'little')))")
    m = P.probe_problem({"source": source, "device": "cpu", "time": False, "ablations": None})
    assert m["redraw_differs"] and m["rebuild"]["error"] > 0


NUMPY_FORWARD = "return x * torch.from_numpy(__import__('numpy').ones(4, dtype='float32'))"


@pytest.mark.parametrize("forward", ["return x[x > 0]", NUMPY_FORWARD])
def test_unknown_when_meta_cannot_run_it(forward):
    source = BIG.replace("return torch.softmax(self.proj(x), dim=-1) * x", forward) \
        .replace("batch_size = 1 << 17", "batch_size = 4").replace("n = 1 << 14", "n = 4")
    est = MM.estimate_problem({"source": source})
    assert est["method"] == "unknown" and est["reason"]
    assert "on the host" not in est["reason"]  # built on meta: no host build was tried
    assert MM.probe_bytes(est) is None and MM.minimum_bytes(est) is None


READS_IN_INIT = """
import torch
import torch.nn as nn
class Model(nn.Module):
    def __init__(self, depth):
        super().__init__()
        rates = [r.item() for r in torch.linspace(0, 0.5, depth)]  # Swin's drop-path rule
        self.blocks = nn.ModuleList(nn.Linear(64, 64) for _ in rates)
        self.scales = rates
    def forward(self, x):
        for block, scale in zip(self.blocks, self.scales):
            x = x + (1 - scale) * block(x)
        FORWARD
def get_inputs():
    return [torch.randn(32, 64)]
def get_init_inputs():
    return [3]
"""


def test_a_constructor_that_reads_a_value_is_built_on_the_host_and_estimated_on_meta():
    source = READS_IN_INIT.replace("FORWARD", "return x")
    est = MM.estimate_problem({"source": source})
    assert est["method"] == "meta" and est["built_on"] == "cpu", est
    real = MM.measure_forward(load_namespace(source, "real"), 0, "cpu")
    for key in ("params_bytes", "inputs_bytes", "outputs_bytes"):
        assert est[key] == real[key], (key, est[key], real[key])
    assert real["forward_peak_bytes"] <= est["forward_peak_bytes"]


def test_a_forward_that_reads_a_value_stays_unknown_with_the_meta_reason():
    source = READS_IN_INIT.replace("FORWARD", "return x[x > x.mean().item()]")
    est = MM.estimate_problem({"source": source})
    assert est["method"] == "unknown" and "item" in est["reason"], est
    assert "on the host" in est["reason"]  # both attempts' reasons


def test_a_problem_too_large_for_the_cpu_worker_is_flagged_too_large_not_runs():
    # sizes written as shifts (``1 << 17``): resize does not scale them, so it would run at
    # full size
    validation = validate_source(BIG, config={"timeout_s": 120})
    assert validation["flags"] == ["too_large"], validation["checks"]
    assert validation["checks"]["runs"]["passed"] is None
    assert validation["memory"]["method"] == "meta"
    assert validation["checks"]["too_large"]["value"] == validation["memory"]["estimate_bytes"]
    assert validation["memory"]["estimate_bytes"] > 16 << 30


HIDDEN = """
import numpy as np
import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, x):
        big = torch.from_numpy(np.ones((1 << 33,), dtype=np.float32))  # invisible to meta
        return x + big[: x.numel()].view_as(x)
n = 4
def get_inputs():
    return [torch.randn(n, n)]
def get_init_inputs():
    return []
"""


def test_out_of_memory_alone_is_too_large_even_when_no_estimate_saw_it():
    # its sizes look small and meta cannot follow numpy: the 32 GiB array surfaces only when the
    # worker runs out of memory, under its limit and again alone with the whole host budget
    # (run in workers only: their address-space limit refuses it before a page is touched)
    from kernelmill.validate.harness import run_in_worker

    est = run_in_worker("kernelmill.validate.memory:estimate_problem", {"source": HIDDEN},
                        timeout_s=120, device="cpu")
    assert est.ok and est.value["method"] == "unknown", est
    validation = validate_source(HIDDEN, config={"timeout_s": 120})
    assert validation["flags"] == ["too_large"], validation["checks"]
    assert validation["checks"]["too_large"]["detail"].startswith("out of host memory (")
    assert validation["memory"]["retried_alone"]
    assert validation["checks"]["runs"]["passed"] is None


MID = BIG.replace("batch_size = 1 << 17", "batch_size = 1 << 14").replace("n = 1 << 14",
                                                                          "n = 1 << 12")


@pytest.fixture(scope="module")
def gpu_validation():
    """256 MiB of input, 64 MiB of weights, validated once on the GPU with Inductor."""
    if not torch.cuda.is_available():
        pytest.fail("the gpu tests need a CUDA device")
    from kernelmill.core.devices import device_slots
    from kernelmill.validate.admission import budget_for, reset_budgets

    reset_budgets()
    slot = device_slots("cuda")[0]
    budget = budget_for(slot)
    assert budget is not None and 0 < budget.capacity < budget.total
    # every worker runs (a probe failing a check would end it before its replay)
    yield validate_source(MID, slot, {"inductor": True, "cross_process": True,
                                      "early_exit": False})
    reset_budgets()


@pytest.mark.gpu
def test_on_a_gpu_the_estimate_bounds_the_allocator_peak(gpu_validation):
    """The probe's real peak (max_memory_reserved) stays under what admission reserved for it,
    and the GPU's budget was read from a worker."""
    mem = gpu_validation["memory"]
    assert mem["method"] == "meta" and mem["inputs_bytes"] == 1 << 28
    assert 0 < mem["measured_bytes"] <= mem["need_bytes"], mem
    assert not mem["retried_alone"] and not mem["too_large"]
    assert gpu_validation["checks"]["runs"]["passed"], gpu_validation["checks"]["runs"]


@pytest.mark.gpu
def test_on_a_gpu_the_replay_estimate_bounds_its_live_peak(gpu_validation):
    """The replay's live tensors stay within what it asked, and its allocator (expandable
    segments) within the cap it was given."""
    from kernelmill.validate.admission import CAP_FACTOR

    replay = gpu_validation["memory"]["replay"]
    assert 0 < replay["measured_allocated_bytes"] <= replay["need_bytes"], replay
    assert replay["measured_bytes"] <= CAP_FACTOR * replay["need_bytes"], replay


def test_an_output_made_again_after_the_fp64_forward_gives_the_same_measurements(monkeypatch):
    source = small(SEEDS_DIR / "swiglu_feed_forward.py")
    payload = {"source": source, "device": "cpu", "time": False, "ablations": None}
    kept = P.probe_problem(payload)
    monkeypatch.setattr(P, "REMAKE_BYTES", 0)  # every output is let go during the fp64 forward
    remade = P.probe_problem(payload)
    volatile = {"peak_bytes", "peak_allocated_bytes"}
    assert {k: v for k, v in remade.items() if k not in volatile} == \
        {k: v for k, v in kept.items() if k not in volatile}
    assert remade["tolerance"]["noise"] is not None  # fp64 ran, against the remade output


def test_a_replay_timed_without_graphs_is_estimated_from_its_live_tensors():
    from kernelmill.validate.timer import GRAPH_OUTPUT_BYTES
    from kernelmill.validate.memory import replay_bytes

    def est(out):  # an elementwise forward: as large an input, one temporary
        return {"method": "meta", "params_bytes": 0, "inputs_bytes": out, "outputs_bytes": out,
                "forward_peak_bytes": 3 * out, "mutates_inputs": False}

    small, large = GRAPH_OUTPUT_BYTES, 6 * GRAPH_OUTPUT_BYTES
    # graph-timed: its pools keep whole forwards reserved (3 i + 2 o + 2 act)
    assert replay_bytes(est(small), base=0) == 3 * small + 2 * small + 4 * small
    # timed by events: inputs, the kept output and two forwards' tensors
    assert replay_bytes(est(large), base=0) == large + large + 4 * large
    assert replay_bytes({**est(large), "mutates_inputs": True}, base=0) == 7 * large

