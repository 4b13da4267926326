"""The launch-overhead check on forwards that sync with the host (validate/device_work.py,
``checks.judge_launch``): a launch-bound loop with a host sync per step fails like one without.

The verdict is GPU-only; here the decision is fed by the CPU reading of real problems (each
top-level op one launch, its time less an idle op's the device's work), and the CUDA path runs
in ``test_validate_gpu.py``.
"""
import math

import pytest
from kernelmill.validate import checks as C
from kernelmill.validate.device_work import device_work, syncs_in_loops
from kernelmill.validate.forwards import build_model, draw_inputs, load_namespace, seeds

# A loop of tiny elementwise steps, each read back to the host: on a GPU, every step is two
# kernel launches and a sync around microseconds of work.
LOOP_WITH_SYNCS = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, steps):
        super().__init__()
        self.steps = steps

    def forward(self, x):
        total = 0.0
        for _ in range(self.steps):
            x = x * 0.99 + 0.01
            total += x.sum().item()
        return x * total

def get_inputs():
    return [torch.randn(64)]

def get_init_inputs():
    return [150]
'''

# Real work between two host reads: the syncs cost nothing next to it.
MATMUL_WITH_SYNC = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, a, b):
        y = a @ b
        return y / y.abs().max().item()

def get_inputs():
    return [torch.randn(384, 384), torch.randn(384, 384)]

def get_init_inputs():
    return []
'''


# 1,200 launches of microseconds of work, no sync: more than the driver queues ahead of the GPU.
LOOP_OF_LAUNCHES = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, steps):
        super().__init__()
        self.steps = steps

    def forward(self, x):
        for _ in range(self.steps):
            x = x * 0.99 + 0.01
        return x

def get_inputs():
    return [torch.randn(64)]

def get_init_inputs():
    return [600]
"""

# 10,000 launches of real work on a GPU slower than its host: 5,000 steps of a 1024x1024 fp32
# matmul (about 40 us each on an H200) and a tanh, each launch a few us. The queue fills after
# about a thousand launches and the host then waits for room: its host time reads about 0.9 of
# the GPU's (1 less a queue's share), while the GPU never waits on it.
QUEUED_MATMULS = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, steps):
        super().__init__()
        self.steps = steps
        self.w = nn.Parameter(torch.randn(1024, 1024) / 32)

    def forward(self, x):
        for _ in range(self.steps):
            x = torch.tanh(x @ self.w)
        return x

def get_inputs():
    return [torch.randn(1024, 1024)]

def get_init_inputs():
    return [5000]
"""

def _measured(source: str) -> dict:
    """The probe's timing entry for ``source`` as the CPU reading gives it."""
    ns = load_namespace(source)
    sd = seeds(0)
    model = build_model(ns, sd, "cpu")
    inputs = draw_inputs(ns, sd["inputs"], "cpu")
    work = device_work(model, lambda: [v.clone() for v in inputs], "cpu")
    return {"device": "cuda", "eager_ms": work["wall_ms"], "host_syncs": work["syncing_ops"],
            "syncs_in_loops": syncs_in_loops(source), "device_work": work}


def test_launch_bound_loop_with_a_sync_per_step_fails():
    # On CPU each op's own time stands for its kernel's: a host loaded by other processes
    # (CI's two cores) stretches those and lowers the host's share (0.69 read once against
    # the 1.0 bar). Read up to three times, until a reading is over the bar.
    limit = C.DEFAULT_THRESHOLDS["max_launch_ratio"]
    for _ in range(3):
        timing = _measured(LOOP_WITH_SYNCS)
        verdict = C.judge_launch(timing, limit)
        if verdict["value"] is not None and verdict["value"] > 1.0:
            break
    work = timing["device_work"]
    # two elementwise ops, a sum and its read-back per step
    assert work["kernels"] == 4 * 150 + 1 and work["syncing_ops"] == 150
    assert verdict["passed"] is False, verdict
    assert verdict["value"] > 1.0
    assert "waits for the GPU 150 time(s)" in verdict["detail"]
    assert "launch- and sync-bound" in verdict["detail"]
    assert "line 14: .item()" in verdict["detail"]


def test_compute_bound_forward_with_a_sync_passes():
    timing = _measured(MATMUL_WITH_SYNC)
    assert timing["device_work"]["syncing_ops"] == 1 and timing["syncs_in_loops"] == []
    verdict = C.judge_launch(timing, C.DEFAULT_THRESHOLDS["max_launch_ratio"])
    assert verdict["passed"] is True, verdict
    assert verdict["value"] < 0.5


def test_the_verdict_in_judge_carries_the_reason_code():
    from test_validate_checks import _measurements

    loop = _measured(LOOP_WITH_SYNCS)
    assert C.DEFAULT_THRESHOLDS["min_ms"] <= loop["eager_ms"] <= C.DEFAULT_THRESHOLDS["max_ms"]
    checks = C.judge(_measurements(aten_ops=["aten.mul", "aten.add"], timing=loop))
    assert C.summarize(checks) == (False, ["launch_overhead"]), checks
    # the same problem before this check judged syncing forwards: it stood down
    checks = C.judge(_measurements(aten_ops=["aten.mul", "aten.add"],
                                   timing={**loop, "device_work": None}))
    assert C.summarize(checks) == (True, [])


def test_the_lesser_reading_of_a_syncing_call_is_judged():
    """A cuDNN convolution that waits once: the replay's eager time read 4.3 ms (its library
    picked a slower algorithm under the worker's memory cap) where the probe's profiled call
    read 1.9 ms beside 1.86 ms of kernels. The host waits at most the lesser excess."""
    work = {"kernels": 1, "busy_ms": 1.86, "wall_ms": 1.95}
    conv = {"eager_ms": 4.33, "host_syncs": 1, "device_work": work}
    verdict = C.judge_launch(conv, 0.8)
    assert verdict["passed"] is True and verdict["value"] < 0.1, verdict
    assert "profiled call" in verdict["detail"]
    # both readings long: the loop that waits at every step still fails, by the eager reading
    loop = {"eager_ms": 9.0, "host_syncs": 150,
            "device_work": {"kernels": 601, "busy_ms": 2.0, "wall_ms": 12.0}}
    verdict = C.judge_launch(loop, 0.8)
    assert verdict["passed"] is False and verdict["value"] == pytest.approx(3.5)
    assert "of eager 9 ms" in verdict["detail"]


def test_host_wait_ratio_and_standing_down():
    assert C.host_wait_ratio(1.0, 0.5) == pytest.approx(1.0)
    assert C.host_wait_ratio(0.4, 0.5) == 0.0  # kernels overlapping: no wait
    assert math.isinf(C.host_wait_ratio(1.0, 0.0))
    unread = {"eager_ms": 1.0, "host_syncs": 3, "device_work": {"error": "no CUPTI"}}
    verdict = C.judge_launch(unread, 0.8)
    assert verdict["passed"] is None and "no CUPTI" in verdict["detail"]
    # without syncs, host issue time over GPU time, as before
    assert C.judge_launch({"eager_ms": 0.05, "host_ms": 0.045, "launch_ratio": 0.9},
                          0.8)["passed"] is False


def test_host_reads_in_forward_loops_are_found_statically():
    source = '''
class Model(nn.Module):
    def forward(self, x):
        n = x.sum().item()          # outside a loop: once per forward
        for i in range(4):
            x = x + float(x.max())
            torch.cuda.synchronize()
        while x.mean().cpu() > 0:
            x = x - 1
        return [v.item() for v in x.tolist()]
'''
    assert syncs_in_loops(source) == ["line 6: float()", "line 7: .synchronize()",
                                      "line 8: .cpu()", "line 10: .item()"]
    assert syncs_in_loops("def broken(:") == []


def test_cpu_probe_records_no_device_work():
    """On CPU the probe records the static evidence and no profiler reading (the check is
    GPU-only), so the CPU pipeline pays nothing for it."""
    from kernelmill.validate.probe import GpuLock
    from kernelmill.validate.probe_device import _host_syncs, _syncing_work

    ns = load_namespace(LOOP_WITH_SYNCS)
    sd = seeds(0)
    model = build_model(ns, sd, "cpu")
    inputs = draw_inputs(ns, sd["inputs"], "cpu")
    syncing = _host_syncs(model, inputs, "cpu", LOOP_WITH_SYNCS)
    assert syncing == {"host_syncs": None, "syncs_in_loops": ["line 14: .item()"],
                       "device_work": None}
    assert _syncing_work(GpuLock(None), "cpu", model, inputs, syncing) == syncing
    # where the count says it syncs (on CUDA), the reading is taken after the timing
    read = _syncing_work(GpuLock(None), "cpu", model, inputs, {**syncing, "host_syncs": 150})
    assert read["device_work"]["syncing_ops"] == 150 and read["device_work"]["kernels"] == 601


@pytest.mark.gpu
def test_device_work_reads_kernel_records_on_cuda():
    """On CUDA the reading is the device's own: kernels (and the read-backs' copies) by CUPTI,
    their busy time by the device's clock, far under the host-bound call's wall time."""
    import torch

    if not torch.cuda.is_available():
        pytest.fail("the gpu tests need a CUDA device")
    ns = load_namespace(LOOP_WITH_SYNCS)
    sd = seeds(0)
    model = build_model(ns, sd, "cuda")
    inputs = draw_inputs(ns, sd["inputs"], "cuda")
    work = device_work(model, lambda: [v.clone() for v in inputs], "cuda")
    assert work["kernels"] >= 3 * 150 and work["syncing_ops"] == 150, work
    assert 0 < work["busy_ms"] < work["wall_ms"] / 2, work
    assert work["op_floor_ms"] is None


@pytest.mark.parametrize(("every_call", "expected"), [(True, 3), (False, 0)])
def test_only_syncs_every_call_makes_are_counted(monkeypatch, every_call, expected):
    """A sync a forward makes on its first call alone (a library's algorithm search, an
    allocator growing its pool) is not the forward's own: the fewest over the calls counts;
    three ``.item()`` reads every call stay three. The CUDA calls are stood in for on CPU; the
    count is of the warnings sync-debug mode raises."""
    import warnings

    import torch

    from kernelmill.validate import probe_device

    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", lambda *a, **k: None)
    calls = []

    class Syncing(torch.nn.Module):
        def forward(self, x):
            calls.append(1)
            if every_call or len(calls) == 1:
                for _ in range(3):
                    warnings.warn("called a synchronizing CUDA operation")
            return x * 2

    count = probe_device._count_host_syncs(Syncing(), [torch.ones(4)], "cuda:0")
    assert count == expected
    assert len(calls) == probe_device.SYNC_CALLS  # a forward that synced is called again


def test_a_syncing_forwards_kernels_are_read_with_the_gpu_alone():
    """The busy time the launch check divides by is read under the GPU's lock held
    exclusively, as the eager time is timed: beside other processes' kernels a forward's own
    read longer, and a launch-bound forward passed in one audit and failed in the next."""
    import contextlib

    import torch

    from kernelmill.validate import probe_device

    modes = []

    class Lock:
        @contextlib.contextmanager
        def exclusive(self):
            modes.append("exclusive")
            yield self

        @contextlib.contextmanager
        def shared(self):
            modes.append("shared")
            yield self

    model = torch.nn.Linear(8, 8)
    syncing = {"host_syncs": 2, "syncs_in_loops": [], "device_work": None}
    got = probe_device._syncing_work(Lock(), "cpu", model, [torch.randn(4, 8)], syncing)
    assert modes == ["exclusive"]
    assert got["device_work"]["kernels"] and got["device_work"]["busy_ms"] is not None
    modes.clear()
    quiet = {"host_syncs": 0, "syncs_in_loops": [], "device_work": None}
    assert probe_device._syncing_work(Lock(), "cpu", model, [torch.randn(4, 8)], quiet) == quiet
    assert modes == []  # a forward that never syncs takes no hold for it


def test_a_host_time_the_allocator_held_in_every_sample_is_judged_and_said():
    """Host samples that each called the driver to free or map memory are judged as they are
    (a launch-bound loop at its memory cap must not escape), and the detail says so."""
    timing = {"eager_ms": 0.5, "host_ms": 40.0, "launch_ratio": 80.0, "host_syncs": 0}
    assert C.judge_launch(timing, 0.8)["passed"] is False
    held = C.judge_launch({**timing, "host_driver_allocations": 2}, 0.8)
    assert held["passed"] is False and "into the driver" in held["detail"]
    quick = {**timing, "host_ms": 0.1, "launch_ratio": 0.2, "host_driver_allocations": 2}
    assert C.judge_launch(quick, 0.8)["passed"] is True


def test_host_samples_keep_the_collector_off_and_report_wall_and_thread_time(monkeypatch):
    """The timer's host samples: the interpreter's collector is off while the call is issued and
    on again after; the record keeps the wall time beside the process's CPU time."""
    import gc

    from kernelmill.validate import timer as T

    states = []

    def forward():
        states.append(gc.isenabled())
        return sum(range(20000))

    assert gc.isenabled()
    info = T.Timer(forward, "cpu", graph=False).prepare()
    assert gc.isenabled()
    # the first warm-up, one sample (is the call long?), the other warm-up, three samples, then
    # the estimate's calls: only the four host samples ran with the collector off
    assert states[:6] == [True, False, True, False, False, False], states
    assert states.count(False) == 4 and all(states[6:]), states
    assert info["host_ms"] == info["host_wall_ms"] > 0  # one clock on CPU
    assert 0 < info["host_thread_ms"] <= info["host_wall_ms"] * 1.5 + 1  # the thread's own
    assert info["host_driver_allocations"] is None


def test_host_samples_without_driver_calls_decide_and_a_later_reading_only_lowers_it():
    """The host time is the least over samples in which the allocator made no driver call
    (where any did not), as CPU time; a reading taken again (with the GPU alone) lowers it,
    never raises it; a reading over half the call's estimate is taken again."""
    from kernelmill.validate import timer as T

    t = T.Timer(lambda: None, "cpu", graph=False)
    t._host_times(True, [(50.0, 40.0, 39.0, 2), (60.0, 45.0, 44.0, 3), (5.0, 1.0, 0.8, 0)])
    assert (t.host_ms, t.host_wall_ms, t.host_thread_ms, t.host_driver_allocations) == \
        (1.0, 5.0, 0.8, 0)
    t._host_times(True, [(9.0, 3.0, 3.0, 0)])
    assert (t.host_ms, t.host_wall_ms, t.host_thread_ms) == (1.0, 5.0, 0.8)
    t._host_times(True, [(2.0, 0.5, 0.4, 0)])
    assert (t.host_ms, t.host_wall_ms, t.host_thread_ms) == (0.5, 2.0, 0.4)
    dirty = T.Timer(lambda: None, "cpu", graph=False)
    taken = []
    dirty._host_sample = lambda cuda: taken.append(cuda) or (70.0, 50.0, 50.0, 1)
    dirty._host_times(True, [(50.0, 40.0, 40.0, 2), (60.0, 45.0, 45.0, 3)])  # every one drove
    assert len(taken) == 3 * T.HOST_RETRIES  # rounds of three more, all driving too
    assert (dirty.host_ms, dirty.host_driver_allocations) == (40.0, 1)
    dirty.estimate_ms = 100.0
    assert not dirty.host_reads_launch_bound()
    dirty.estimate_ms = 50.0
    assert dirty.host_reads_launch_bound()
    assert not dirty.host_again()  # only on CUDA


def test_a_host_waiting_for_room_in_the_launch_queue_is_not_launch_overhead():
    """A forward of more launches than the driver queues, on a host faster than its GPU
    (cuDNN's tiled FFT transposed convolution, 3,676 kernels: KernelBench's
    ``57_conv_transposed_2D`` read host 54.9 ms against 28.2 ms of GPU beside other problems'
    work; alone its host returned after 19.4 ms of a 27.6 ms call), waits inside its launches,
    so its host time tracks its GPU time: the queue still held work when the host returned and
    the GPU never waited on it, and it passes. A host about as fast as its GPU or slower never
    fills the queue (``65`` and ``71_conv_transposed_2D``: host 8.29 and 10.1 ms against
    graphs of 7.82 and 7.48), so its host time is issue time and the verdict stands; so it
    does for a loop of tiny launches, readings that disagree, a forward of fewer launches than
    the queue, and a reading that failed."""
    queued = {"eager_ms": 28.18, "host_ms": 54.9, "launch_ratio": 54.9 / 28.18, "host_syncs": 0,
              "device_work": {"kernels": 3676, "busy_ms": 27.1, "wall_ms": 31.4,
                              "eager_wall_ms": 27.7, "eager_issue_ms": 19.5}}
    verdict = C.judge_launch(queued, 0.8)
    assert verdict["passed"] is True, verdict
    assert "waited for room in the queue" in verdict["detail"]
    assert "never waiting on the host" in verdict["detail"]

    def judged(work: dict, **timing) -> bool:
        return C.judge_launch({**queued, **timing,
                               "device_work": {**queued["device_work"], **work}}, 0.8)["passed"]

    # 65: as fast as its GPU, the queue never full: the host returned with 0.3 ms ahead
    assert judged({"kernels": 1081, "busy_ms": 8.82, "eager_wall_ms": 9.21,
                   "eager_issue_ms": 8.9}, eager_ms=7.818, host_ms=8.29,
                  launch_ratio=8.29 / 7.818) is False
    # 71: slower than its GPU, which waits (14.5 ms for 11.3 of kernels)
    assert judged({"kernels": 1891, "busy_ms": 11.3, "eager_wall_ms": 14.5,
                   "eager_issue_ms": 14.3}, eager_ms=7.479, host_ms=10.1,
                  launch_ratio=10.1 / 7.479) is False
    # tiny launches: the GPU idles between them
    assert judged({"kernels": 1200, "busy_ms": 1.9, "eager_wall_ms": 6.3,
                   "eager_issue_ms": 6.2}) is False
    # a queue that held work at the return, but a GPU that waited before it
    assert judged({"eager_wall_ms": 33.0, "eager_issue_ms": 24.0}) is False
    # readings that disagree: an eager call far shorter than its kernels' busy time
    assert judged({"busy_ms": 40.0, "eager_wall_ms": 27.7}) is False
    assert judged({"kernels": C.LAUNCH_QUEUE - 1}) is False
    assert judged({"eager_issue_ms": None}) is False
    unread = {**queued, "device_work": {"error": "CUPTI unavailable"}}
    assert C.judge_launch(unread, 0.8)["passed"] is False
    assert C.judge_launch({**queued, "device_work": None}, 0.8)["passed"] is False


def test_the_device_work_of_a_launch_bound_reading_is_taken_alone(monkeypatch):
    """The replay reads ``device_work`` with the GPU alone only where its host time read over
    ``LAUNCH_SUSPECT`` of the GPU time; the record keeps it beside the probe's sync readings."""
    import contextlib

    import torch

    from kernelmill.validate import probe_device, worker_budgets

    modes, calls = [], []

    class Lock:
        @contextlib.contextmanager
        def exclusive(self):
            modes.append("exclusive")
            yield self

    monkeypatch.setattr(probe_device, "device_work",
                        lambda model, args, device: calls.append(device) or {"kernels": 2})
    model, inputs = torch.nn.Linear(4, 4), [torch.randn(2, 4)]
    for ratio in (None, probe_device.LAUNCH_SUSPECT):
        assert probe_device._launch_work(Lock(), "cuda:0", model, inputs,
                                         {"launch_ratio": ratio}) is None
    assert probe_device._launch_work(Lock(), "cpu", model, inputs, {"launch_ratio": 2.0}) is None
    assert calls == [] and modes == []
    got = probe_device._launch_work(Lock(), "cuda:0", model, inputs, {"launch_ratio": 1.9})
    assert got == {"kernels": 2} and modes == ["exclusive"] and calls == ["cuda:0"]

    probe = {"host_syncs": 0, "syncs_in_loops": [], "device_work": None}
    replay = {"timing": {"eager_ms": 28.2, "launch_ratio": 1.9, "device_work": got}}
    merged = worker_budgets._eager_timing(probe, replay, "", [])
    assert merged["device_work"] == got and merged["host_syncs"] == 0
    syncing = {**probe, "host_syncs": 3, "device_work": {"kernels": 9}}
    assert worker_budgets._eager_timing(syncing, replay, "", [])["device_work"] == {"kernels": 9}
    bare = {"timing": {"eager_ms": 1.0, "launch_ratio": 0.1}}
    assert worker_budgets._eager_timing(probe, bare, "", [])["device_work"] is None


def test_a_loop_of_more_launches_than_the_queue_reads_its_launches_on_cpu():
    """The reading the queued-launch verdict counts on: every launch of the loop is one."""
    timing = _measured(LOOP_OF_LAUNCHES)
    assert timing["device_work"]["kernels"] == 2 * 600 >= C.LAUNCH_QUEUE
    assert timing["device_work"]["eager_wall_ms"] is None  # a CUDA reading
