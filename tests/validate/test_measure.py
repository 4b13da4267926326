"""The shared measurement modules (validate/measure.py, validate/timer.py) and the parent-driven
timing window (validate/window.py), on CPU: the same code paths the GPU runs, timed with
perf_counter."""
import itertools
import os
import random
import statistics
import sys
import textwrap
import threading
import time
from types import SimpleNamespace

import pytest
import torch
from kernelmill.validate import measure as M
from kernelmill.validate import timer as T
from kernelmill.validate import timing_graph as TG
from kernelmill.validate import window_worker as W
from kernelmill.validate.harness import Control, run_in_worker
from kernelmill.validate.gpus import gpu_lock_path
from kernelmill.validate.window import (
    WindowSettings,
    run_window,
    verdict_timing,
)
from kernelmill.validate.window_turns import _round_order, _window_cis

_clock = time.perf_counter  # busy() keeps working while a test patches time.perf_counter


def busy(ms: float):
    """A callable that really spends ``ms`` of CPU time (not sleep: no scheduler rounding)."""
    def fn():
        end = _clock() + ms / 1e3
        while _clock() < end:
            pass
    return fn


# ---------------------------------------------------------------- namespaces and outputs

def test_load_namespace_registers_source_and_checks_required_names():
    ns = M.load_namespace("def f():\n    return 41 + 1\n", "unit")
    assert ns["f"]() == 42 and sys.modules["kernelmill_unit"].__dict__ is ns
    import inspect

    assert "41 + 1" in inspect.getsource(ns["f"])  # Triton reads kernels this way
    with pytest.raises(NameError, match="get_inputs"):
        M.load_namespace("class Model: pass\n", "unit2", require=("Model", "get_inputs"))


def test_flatten_outputs_and_output_tensors():
    x = torch.ones(2)
    assert M.flatten_outputs(x) == ("tensor", [x])
    assert M.flatten_outputs((x, 3))[0] == "tuple:2"
    assert M.flatten_outputs(None)[0] == "NoneType"
    assert len(M.output_tensors((x, [x, {"b": x, "a": x}], None))) == 4
    assert M.output_tensors(3.0)[0].item() == 3.0
    with pytest.raises(TypeError):
        M.output_tensors("text")


# ---------------------------------------------------------------- statistics

def test_median_ci_covers_the_true_median_about_95_percent_of_the_time():
    rng = random.Random(7)
    covered, trials = 0, 400
    for _ in range(trials):
        samples = [rng.lognormvariate(0.0, 0.3) for _ in range(60)]  # true median 1.0
        median, half = statistics.median(samples), M.median_ci_pct(samples) / 100
        covered += abs(median - 1.0) <= half * median
    assert 0.90 <= covered / trials <= 0.995, covered / trials


def test_median_ci_shrinks_with_samples_and_needs_six():
    assert M.median_ci_pct([1.0] * 5) is None
    assert M.median_ci_pct([1.0] * 8) == 0.0
    rng = random.Random(1)
    few = M.median_ci_pct([rng.gauss(10, 1) for _ in range(20)])
    many = M.median_ci_pct([rng.gauss(10, 1) for _ in range(2000)])
    assert many < few / 4


# ---------------------------------------------------------------- the timer on CPU

def test_measure_times_a_known_cost_and_reports_its_method():
    result = T.measure(busy(2.0), "cpu", cap_ms=400, min_reps=10)
    assert result["method"] == "perf_counter"
    assert 1.9 <= result["ms"] <= 6.0, result  # preemption on a loaded machine only adds
    assert result["reps"] >= 10 and result["ci_pct"] is not None


def test_measure_stops_at_the_ci_target_or_the_cap():
    quick = T.measure(busy(0.2), "cpu", ci_target_pct=50.0, cap_ms=5000, min_reps=10,
                      round_reps=10)
    assert quick["reps"] <= 30 and quick["ci_pct"] <= 50.0  # met within a few rounds
    began = time.perf_counter()
    capped = T.measure(busy(1.0), "cpu", ci_target_pct=0.0, cap_ms=100, round_reps=5)
    assert time.perf_counter() - began < 1.0 and capped["reps"] < 200


def test_a_long_call_is_prepared_and_sampled_with_the_fewest_calls():
    calls = []

    def slow():  # a call of 80 ms: the second already says it is long
        calls.append(1)
        time.sleep(0.08)

    timer = T.Timer(slow, "cpu")
    timer.prepare()
    assert len(calls) == 3, len(calls)  # a warm-up, its host time, one estimate (was 9)
    assert timer.estimate_ms >= 80 and timer.host_ms >= 80
    short = []
    T.Timer(lambda: (short.append(1), busy(1.0)()), "cpu").prepare()
    assert len(short) == 9, len(short)  # a short call: 3 warm-ups, 3 host times, 3 estimates
    calls.clear()
    result = T.measure(slow, "cpu", ci_target_pct=1.0, cap_ms=200, min_reps=5, round_reps=5,
                       long_call_reps=3, warm_ms=1.0)
    # three samples, not five: 5 x 80 ms would overrun the 200 ms cap; one warm-up sample
    assert result["reps"] == 3 and len(calls) == 3 + 1 + 3, (result, len(calls))
    calls.clear()
    plain = T.measure(slow, "cpu", ci_target_pct=1.0, cap_ms=200, min_reps=5, round_reps=5,
                      warm_ms=1.0)
    assert plain["reps"] == 5, plain  # without ``long_call_reps`` the rounds are unchanged
    phases = []
    T.measure(busy(0.5), "cpu", cap_ms=20, warm_ms=1.0, on_phase=phases.append)
    assert phases == ["prepare", "warm", "samples"]


def _sizing_replays(monkeypatch, per_call_ms: float, output_numel: int):
    """``Timer._per_call_ms`` on fake graphs whose replays take ``per_call_ms`` per call: the
    estimate and the graphs it captured (by their call counts)."""
    clock = {"ms": 0.0}
    captured = []

    def captured_graph(self, stream, calls):
        captured.append(calls)
        return calls, [torch.empty(0)] * calls

    monkeypatch.setattr(T.Timer, "_captured", captured_graph)
    monkeypatch.setattr(TG, "_graph_replay", lambda calls: clock.update(
        ms=clock["ms"] + calls * per_call_ms))
    monkeypatch.setattr(TG, "_event_record", lambda event: clock.update(ms=0.0)
                        if event == "start" else None)
    monkeypatch.setattr(TG, "_event_wait", lambda event: None)
    monkeypatch.setattr(TG, "_event_elapsed", lambda start, end: clock["ms"])
    timer = T.Timer(lambda: None, "cpu")
    timer._events, timer.output = ("start", "end"), torch.empty(output_numel)
    return timer._per_call_ms(None), captured


def test_sizing_a_graph_skips_the_larger_graph_where_it_cannot_change_the_sample(monkeypatch):
    # a small call: one- and eight-call graphs, differenced
    estimate, captured = _sizing_replays(monkeypatch, 0.01, 1024)
    assert captured == [1, T.PROBE_CALLS] and estimate == pytest.approx(0.01)
    # a call of 4 samples or more: one replay of the one-call graph is the estimate
    estimate, captured = _sizing_replays(monkeypatch, 5.0, 1024)
    assert captured == [1] and estimate == pytest.approx(5.0)
    # an output the timing graph may hold three of: the larger graph holds three, not eight
    third = T.HELD_OUTPUT_BYTES // 4 // 3
    estimate, captured = _sizing_replays(monkeypatch, 0.01, third)
    assert captured == [1, 3] and estimate == pytest.approx(0.01)
    # an output it may hold once: no larger graph at all
    estimate, captured = _sizing_replays(monkeypatch, 0.01, T.HELD_OUTPUT_BYTES // 4 + 1)
    assert captured == [1]


def test_a_cpu_timer_keeps_the_calling_threads_cpu_time_apart_from_the_wall_clock():
    # Waiting (another process holding the core, a sleep) stretches the wall clock only: the
    # unseen-input check compares CPU time on CPU, where the wall clock needs a 2 ms floor.
    def mostly_asleep():
        busy(1.0)()
        time.sleep(0.02)

    timer = T.Timer(mostly_asleep, "cpu", warmup=1)
    timer.prepare()
    wall = timer.round(3)
    assert min(wall) >= 20.0 and len(timer.cpu_samples) == 3
    assert all(0.0 < cpu <= 8.0 for cpu in timer.cpu_samples), timer.cpu_samples
    assert 0.0 < timer.describe()["cpu_ms"] <= 8.0
    ms, _ = timer.once(mostly_asleep)
    assert ms >= 20.0 and 0.0 < timer.last_cpu_ms <= 8.0


def test_timer_is_bound_before_patches(monkeypatch):
    # A submission that stops the clocks after this module was imported changes nothing.
    monkeypatch.setattr(time, "perf_counter", lambda: 0.0)
    monkeypatch.setattr(statistics, "median", lambda values: 1e-9)
    result = T.measure(busy(1.0), "cpu", cap_ms=200)
    assert result["ms"] >= 0.9
    assert (time, "perf_counter") in M.GUARDED and (torch.cuda.CUDAGraph, "replay") in M.GUARDED


def test_serve_window_answers_commands_in_order():
    commands = iter(["warm 1", "settle 1", "round 4", "round 3 5", "round 2 5 sleep", "loop 5",
                     "stop"])
    reports = []
    calls = []
    timer = T.Timer(lambda: calls.append(1), "cpu", warmup=1)
    timer.prepare()
    summary = W.serve_window(timer, lambda: next(commands), reports.append)
    assert [next(iter(r)) for r in reports] == ["warm", "settle", "round", "round", "round",
                                                "loop"]
    assert len(reports[2]["round"]) == 4 and summary["reps"] == 9 and summary["rounds"] == 3
    assert len(reports[3]["round"]) == 3  # "round 3 5": 5 ms of settling first, untimed
    # "sleep": the settling mostly asleep where a graph is replayed; here samples, as "round 3 5"
    assert len(reports[4]["round"]) == 2 and reports[4]["at"][1] - reports[4]["at"][0] >= 0.005
    assert reports[1]["settle"] >= 2 and summary["settles"] == 3  # settle samples are untimed
    assert summary["loop_samples"] == 5 and summary["method"] == "perf_counter"


def test_a_graph_timers_settling_is_queued_and_slept_through_then_sampled_to_its_end(
        monkeypatch):
    """``Timer.settle`` (``settle_wait="sleep"``): a graph timer queues the replays its
    estimate (plus a launch's cost each) says fill 80% of the settling, at most
    ``SETTLE_MAX_REPLAYS``, waits once on an event made to block, then samples until the
    asked time has passed (one sample at least). No graph: ``warm``. (The driver's side is in
    ``tests/validate/test_cuda_wait.py``.)"""
    seen = {"replays": 0, "events": [], "waited": 0, "samples": 0}

    class Event:
        def __init__(self, **kwargs):
            seen["events"].append(kwargs)

    monkeypatch.setattr(T, "_graph_replay", lambda graph: seen.__setitem__(
        "replays", seen["replays"] + 1))
    monkeypatch.setattr(T, "_Event", Event)
    monkeypatch.setattr(T, "_event_record", lambda event: None)
    monkeypatch.setattr(T, "_event_wait", lambda event: seen.__setitem__(
        "waited", seen["waited"] + 1))

    def timer_of(estimate_ms, calls):
        timer = T.Timer(lambda: None, "cpu")
        timer.method, timer.graph = "cuda_graph", object()
        timer.estimate_ms, timer.calls_per_sample = estimate_ms, calls
        timer.sample = lambda: seen.__setitem__("samples", seen["samples"] + 1) or 0.0
        return timer

    began = time.perf_counter()
    done = timer_of(0.05, 32).settle(40.0)
    assert (time.perf_counter() - began) * 1e3 >= 40.0
    assert seen["replays"] == int(40.0 * T.SETTLE_QUEUED_SHARE / (0.05 * 32 + T.SETTLE_LAUNCH_MS))
    assert seen["events"] == [{"blocking": True}] and seen["waited"] == 1
    assert seen["samples"] >= 1 and done == seen["replays"] + seen["samples"]
    seen.update(replays=0, samples=0)
    timer_of(1e-6, 1).settle(200.0)  # a launch's cost each: not 160,000 replays
    assert seen["replays"] == min(T.SETTLE_MAX_REPLAYS, int(160.0 / T.SETTLE_LAUNCH_MS))
    seen.update(replays=0, samples=0)
    eager = timer_of(0.05, 32)
    eager.graph = None
    eager.settle(5.0)
    assert seen["replays"] == 0 and seen["samples"] >= 2  # no graph: samples, as ``warm``
    with pytest.raises(ValueError):
        WindowSettings(settle_wait="Sleep")


# ---------------------------------------------------------------- the lock

def test_gpu_lock_path_is_per_physical_gpu(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert gpu_lock_path("cpu") is None
    a = gpu_lock_path("cuda:0", {"CUDA_VISIBLE_DEVICES": "3,1"})
    b = gpu_lock_path("cuda:1", {"CUDA_VISIBLE_DEVICES": "3,1"})
    c = gpu_lock_path("cuda", {"CUDA_VISIBLE_DEVICES": "3"})
    assert a == c != b and a.startswith(str(tmp_path))
    assert os.path.exists(a + ".main") and os.path.exists(a + ".turn")


def test_exclusive_window_waits_for_shared_gpu_work(tmp_path):
    assert _window_behind_shared_work(M.GpuLock(str(tmp_path / "gpu"))) == [
        "shared work done", "window"]


def _window_behind_shared_work(lock) -> list:
    """The order of a hold of ``lock`` shared and a window that asked during it."""
    order = []
    with lock.shared():
        thread = _waiting_window(lock, order)
        order.append("shared work done")
    thread.join(5)
    return order


def _waiting_window(lock, order: list) -> threading.Thread:
    """A thread that takes ``lock`` exclusively and logs "window" in ``order``, started and
    given 0.2 s to queue for the lock."""
    def window():
        with lock.exclusive():
            order.append("window")

    thread = threading.Thread(target=window)
    thread.start()
    time.sleep(0.2)
    return thread


def test_waiting_windows_go_before_shared_work_that_asked_earlier(tmp_path):
    """Windows queue ahead of new shared work: when one ends, the next waiting window goes,
    not shared work that asked before it (which would make it wait for all of that work)."""
    lock = M.GpuLock(str(tmp_path / "gpu"))
    order = []

    def shared_work():
        with lock.shared():
            order.append("shared")

    with lock.exclusive():
        order.append("window 1")
        reader = threading.Thread(target=shared_work)
        reader.start()
        time.sleep(0.2)
        second = _waiting_window(lock, order)
        assert order == ["window 1"]
    second.join(5)
    reader.join(5)
    assert order == ["window 1", "window", "shared"]
    # a window turned shared (its checks after timing) no longer holds shared work back
    with lock.exclusive() as held:
        held.downgrade()
        reader = threading.Thread(target=shared_work)
        reader.start()
        reader.join(5)
        assert not reader.is_alive() and order[-1] == "shared"


def test_a_queue_file_that_cannot_be_opened_leaves_the_lock_without_a_queue(tmp_path):
    """(A confined worker may not create the file a grader without the queue never made.)"""
    lock = M.GpuLock(str(tmp_path / "gpu"))
    os.mkdir(str(tmp_path / "gpu") + ".windows")  # opening it fails
    assert _window_behind_shared_work(lock) == ["shared work done", "window"]
    with lock.exclusive() as held:
        held.downgrade()


def test_a_windows_wait_is_split_into_the_queue_before_it_and_the_drain_of_shared_work(
        tmp_path):
    """``queued_s``: behind the windows before it; ``drained_s``: for shared holders to go."""
    lock = M.GpuLock(str(tmp_path / "gpu"))
    waits = {}

    def window(name):
        with lock.exclusive() as held:
            waits[name] = (held.queued_s, held.drained_s)
            time.sleep(0.3 if name == "first" else 0)

    with lock.shared():
        first = threading.Thread(target=window, args=("first",))
        first.start()
        time.sleep(0.4)  # the first window waits for this shared hold
    first.join(5)
    assert waits["first"][1] >= 0.3 and waits["first"][0] < 0.1
    with lock.exclusive():
        second = threading.Thread(target=window, args=("second",))
        second.start()
        time.sleep(0.4)  # the second waits behind this window, not for shared work
    second.join(5)
    assert waits["second"][0] >= 0.3 and waits["second"][1] < 0.1


def test_a_long_shared_hold_lets_a_waiting_window_in_between_its_pieces(tmp_path):
    lock = M.GpuLock(str(tmp_path / "gpu"))
    order = []
    with lock.shared() as held:
        assert not held.let_window_in()  # nobody waits: it keeps the GPU
        order.append("piece 1")
        thread = _waiting_window(lock, order)  # it waits for this hold
        assert order == ["piece 1"]
        waited = []
        assert held.let_window_in(lambda: waited.append(1))
        order.append("piece 2")  # held shared again, after the window
        thread.join(5)
        later = _waiting_window(lock, order)  # and held: a later window waits for it
        order.append("piece 3")
    later.join(5)
    assert order == ["piece 1", "window", "piece 2", "piece 3", "window"] and waited == [1]
    with lock.exclusive() as alone:
        assert not alone.let_window_in()  # an exclusive hold never steps aside


def test_a_probe_stage_steps_aside_for_a_window_before_each_forward(tmp_path, monkeypatch):
    from kernelmill.validate import forwards as F
    from kernelmill.validate import probe_device as PD

    monkeypatch.setattr(PD, "_mark", lambda stage: None)
    lock = M.GpuLock(str(tmp_path / "gpu"))
    model, order = torch.nn.Linear(4, 4), []
    with PD._section(lock, "cpu", "stage"):
        F.run_forward(model, [torch.ones(2, 4)], 0, "cpu")
        order.append("forward 1")
        thread = _waiting_window(lock, order)
        F.run_forward(model, [torch.ones(2, 4)], 0, "cpu")  # lets the window in first
        order.append("forward 2")
        thread.join(5)
    assert order == ["forward 1", "window", "forward 2"]
    assert F._between_forwards[0] is None  # outside a stage a forward waits for nothing


# ---------------------------------------------------------------- the window, two processes

WORKER = textwrap.dedent("""
    import time
    from kernelmill.validate import timer as T
    from kernelmill.validate import window_worker as W
    from kernelmill.validate.harness_worker import receive, report

    def busy():
        end = time.perf_counter() + {ms} / 1e3
        while time.perf_counter() < end:
            pass

    def main():
        {before}
        if not W.await_gpu(receive, report):
            return {{}}
        {early}
        timer = T.Timer(busy, "cpu", warmup=1)
        report({{"ready": timer.prepare()}})
        {cheat}
        record = W.serve_window(timer, receive, report)
        {after}
        return record
""")
# A worker that reports 1 µs per call whatever its calls cost.
CHEAT = "timer.sample = lambda: (busy(), 1e-3)[1]"


def _window(ms: dict[str, float], cheat: str = "", droppable: tuple = (),
            cheats: dict | None = None, early: dict | None = None, before: dict | None = None,
            timeout_s: float = 120, lock: str | None = None, on_finish=None,
            after: dict | None = None, controls: dict | None = None,
            unseen_check: tuple = (), clock_witness: str | None = None,
            activity=None, unscored: tuple = (), **settings) -> tuple[dict, dict]:
    controls = controls if controls is not None else {}
    controls.update({name: Control() for name in ms})
    results = {}
    cheats = cheats if cheats is not None else {"candidate": cheat}

    def launch(name):
        source = WORKER.format(ms=ms[name], cheat=cheats.get(name, ""),
                               early=(early or {}).get(name, ""),
                               before=(before or {}).get(name, ""),
                               after=(after or {}).get(name, ""))
        results[name] = run_in_worker("kernelmill.validate.harness:run_source",
                                      {"source": source}, timeout_s=timeout_s, device="cpu",
                                      control=controls[name])

    threads = [threading.Thread(target=launch, args=(name,)) for name in ms]
    window = run_window(controls, lock=M.GpuLock(lock), cuda=False,
                        settings=WindowSettings(**settings),
                        start=lambda: [t.start() for t in threads],
                        finish=lambda: [on_finish and on_finish()] + [t.join() for t in threads],
                        clock_check=tuple(n for n in ms if n.startswith("candidate")),
                        gpu_handshake=True, droppable=droppable, unseen_check=unseen_check,
                        clock_witness=clock_witness, activity=activity, unscored=unscored)
    return window, results


def test_window_times_two_processes_in_alternating_rounds():
    window, results = _window({"reference": 3.0, "candidate": 1.0}, cap_ms=1500,
                              ci_target_pct=1.0)
    assert window["error"] is None and all(r.ok for r in results.values()), results
    timing = verdict_timing(window)
    assert timing["method"] == "perf_counter" and timing["reps"] >= 12
    assert 2.4 <= timing["reference_ms"] / timing["candidate_ms"] <= 3.6, timing
    # each worker's own record of the window agrees with what the parent received
    for name, result in results.items():
        assert result.value["reps"] == window["participants"][name]["reps"]
    # the parent's clock over a back-to-back loop agrees with the worker's mean (both see the
    # same preemptions on a loaded machine; the median does not)
    cand = window["participants"]["candidate"]
    assert 0.9 <= cand["wall_ms"] and 0.5 <= cand["mean_ms"] / cand["wall_ms"] <= 2.0, cand
    # each round's median of each participant, by round: every round timed both, in order
    for name, ms in (("reference", 3.0), ("candidate", 1.0)):
        medians = window["participants"][name]["round_medians_ms"]
        assert [r for r, _ in medians] == list(range(window["rounds"])), medians
        assert all(0.8 * ms <= m <= 3 * ms for _, m in medians), medians


def test_an_unscored_participant_warms_but_takes_no_turn_in_the_rounds():
    """The reference unscored (its time pooled from other windows): the rounds hold the
    candidate alone and stop on its CI; the reference is ready and warmed, with no samples."""
    window, results = _window({"reference": 3.0, "candidate": 1.0}, cap_ms=1500,
                              ci_target_pct=1.0, unscored=("reference",))
    assert window["error"] is None and all(r.ok for r in results.values()), results
    reference, candidate = (window["participants"][n] for n in ("reference", "candidate"))
    assert reference["reps"] == 0 and reference["ms"] is None, reference
    assert reference["method"] == "perf_counter"  # what it would have been timed by
    assert candidate["reps"] >= 12 and 0.8 <= candidate["ms"] <= 3.0, candidate
    assert [r for r, _ in candidate["round_medians_ms"]] == list(range(window["rounds"]))
    assert not reference["round_medians_ms"]
    assert verdict_timing(window) is None  # no reference time from this window


def test_a_median_counts_its_turns_not_only_its_samples():
    rng = random.Random(7)
    steady = {name: [ms * (1 + rng.gauss(0, 0.001)) for _ in range(8)]
              for name, ms in (("reference", 2.0), ("candidate", 1.0))}
    assert all(ci < 0.5 for ci in M.turn_ci_pct(steady).values())
    # turns 3% apart: the median rests on 4 readings, however many samples each turn held
    swinging = {"reference": [2.0, 2.06] * 2, "candidate": [1.0, 1.03] * 2}
    assert all(ci > 2.0 for ci in M.turn_ci_pct(swinging).values())
    # one disturbed turn among many barely widens it; more turns narrow it
    disturbed = {name: [*values[:-1], values[-1] * 1.08] for name, values in steady.items()}
    assert all(ci < 0.5 for ci in M.turn_ci_pct(disturbed).values())
    more = {name: values * 4 for name, values in swinging.items()}
    assert M.turn_ci_pct(more)["candidate"] < M.turn_ci_pct(swinging)["candidate"]
    assert M.turn_ci_pct({"reference": [2.0], "candidate": [1.0]}) == \
        {"reference": None, "candidate": None}
    # with turns enough, each reads its own: a swinging one beside a quiet one is not narrowed
    # by it, nor the quiet one widened
    cis = M.turn_ci_pct({"reference": steady["reference"], "candidate": [1.0, 1.04] * 4})
    assert cis["reference"] < 0.5 and cis["candidate"] > 2.0, cis
    # with fewer turns too: a swinging one reads at least its own scatter
    few = M.turn_ci_pct({"reference": steady["reference"][:4], "candidate": [1.0, 1.04] * 2})
    alone = M.turn_ci_pct({"candidate": [1.0, 1.04] * 2})["candidate"]
    assert few["candidate"] > 2.0 and few["reference"] < few["candidate"] <= alone, few
    # an unreadable turn is no reading
    assert M.turn_ci_pct({"c": [1.0, 1.03, float("nan")]}) == M.turn_ci_pct({"c": [1.0, 1.03]})


def test_turn_medians_that_repeat_exactly_still_read_their_scatter():
    # over half the gaps 0 (medians rounded to 1 ns, a coarse event clock): the mean gap reads
    # the rest, never a CI of 0 that would stop a window at once
    assert M.turn_ci_pct({"a": [1, 1, 1, 1, 1.05]})["a"] > 0.5
    cis = M.turn_ci_pct({"candidate": [1, 1, 1.05], "reference": [2, 2, 2]})
    assert cis["candidate"] > 0.5 and cis["reference"] > 0.5, cis
    assert M.turn_ci_pct({"a": [1.0] * 5}) == {"a": 0.0}  # readings all alike: no scatter
    # the t quantile runs on smoothly past its table (no 4% drop from 30 to 31 turns)
    ts = [M.t95(df) for df in range(1, 200)]
    assert all(a > b for a, b in zip(ts, ts[1:])) and ts[-1] > M.Z95
    assert 0.998 < M.t95(31) / M.t95(30) < 1.0


def test_the_stop_rule_counts_turns_only_when_told_to():
    """What the window's stop rule reads (``_window_cis``), on fixed turns: samples that agree
    within each turn, turns up to 3% apart. Counting samples alone (1,200 of them), the window
    may stop at 0.5%; counting turns (6), it may not. A dropped participant reads no turn CI."""
    rng = random.Random(3)
    paces = [1.0, 1.015, 0.985, 1.03, 0.97, 1.0]
    turns = {"reference": [2.0 * p for p in paces], "candidate": [1.0 * p for p in paces[::-1]]}
    samples = {name: [m * (1 + rng.gauss(0, 1e-4)) for m in medians for _ in range(200)]
               for name, medians in turns.items()}
    result = {"turn_medians_ms": {name: list(enumerate(medians))
                                  for name, medians in turns.items()}}
    names = list(turns)
    by_samples = _window_cis(samples, result, names, by_turns=False)
    by_turns = _window_cis(samples, result, names, by_turns=True)
    assert all(by_samples[n] < 0.5 for n in names), by_samples
    assert all(by_turns[n] > 1.0 for n in names), by_turns
    assert all(by_turns[n] == max(by_samples[n], M.turn_ci_pct(turns)[n]) for n in names)
    dropped = _window_cis(samples, {**result, "dropped": {"candidate": "gone"}}, names, True)
    assert dropped["candidate"] == by_samples["candidate"], dropped


def test_a_window_whose_turns_disagree_says_so_and_can_run_on_until_they_agree():
    """Each 25 ms of the workers' clock holds its own pace (0-4% slower): a turn's samples
    agree, its turns do not. Stopping on its samples, the window stops while its turns still
    disagree, and its summary's CI says how far (counted in turns, wider than the samples
    claim); stopping on turns, it runs on until they agree on a median."""
    before = ("global busy\n    def busy():\n        end = time.perf_counter() + {ms} * "
              "(1 + 0.01 * ((int(time.time() * 40) * 7919) % 5)) / 1e3\n"
              "        while time.perf_counter() < end:\n            pass")
    ms = {"reference": 2.0, "candidate": 1.0}
    befores = {name: before.format(ms=value) for name, value in ms.items()}
    sampled, _ = _window(ms, before=befores, cap_ms=2000, ci_target_pct=0.5, overtime=0)
    counted, _ = _window(ms, before=befores, cap_ms=2000, ci_target_pct=0.5, overtime=0,
                         stop_on_turns=True)
    for window in (counted, sampled):
        assert window["error"] is None, window
    for window in (counted, sampled):
        cand = window["participants"]["candidate"]
        assert cand["turns"] == window["rounds"], cand
        assert cand["ci_pct"] == max(cand["samples_ci_pct"], cand["turn_ci_pct"]), cand
        assert verdict_timing(window)["ci_pct"] >= cand["turn_ci_pct"]

    def capped(window):  # ran its rounds to the 2 s cap rather than stop on its CI
        phases = window["phases_ms"]  # the cap counts from the warm-up's start
        return phases["warm"] + phases.get("resize", 0.0) + phases["rounds"] >= 2000

    # counting turns, it stops only once they agree (or at its cap), never on samples alone
    cand = counted["participants"]["candidate"]
    assert cand["turn_ci_pct"] <= 0.5 or capped(counted), (cand, counted["phases_ms"])
    # stopping on samples, it stopped where the samples alone claimed a narrower CI than their
    # turns allowed (on a host loaded enough to spread a turn's samples too, both windows
    # run to the cap: nothing to compare)
    cand = sampled["participants"]["candidate"]
    if capped(sampled):  # the stop rule itself: test_the_stop_rule_counts_turns_only_when_told_to
        pytest.skip("both windows ran to their cap on this host: no stop to compare")
    # (how many rounds each took depends on the paces its turns drew: the sampled window's own
    # samples may take as long to agree, so the rounds are not compared)
    assert cand["turn_ci_pct"] > cand["samples_ci_pct"], cand


def test_the_reference_witnesses_the_gpus_pace_across_the_unseen_checks():
    """The trusted reference runs one round right before and one right after the candidates'
    unseen checks: the GPU's own slowing over them (a power cap), kept out of its score."""
    window, results = _window({"reference": 3.0, "candidate": 1.0}, cap_ms=600,
                              ci_target_pct=1.0, unseen_check=("candidate",),
                              clock_witness="reference")
    assert window["error"] is None and all(r.ok for r in results.values()), results
    clock = window["unseen_clock_ms"]
    assert set(clock) == {"before", "after"}, clock
    assert all(2.5 <= t <= 30 for when in clock.values() for t in when), clock
    witnessed = sum(len(v) for v in clock.values())
    scored = window["participants"]["reference"]["reps"]
    assert results["reference"].value["reps"] == scored + witnessed
    # a window without unseen checks asks for no witness rounds
    window, _ = _window({"reference": 3.0, "candidate": 1.0}, cap_ms=300,
                        clock_witness="reference")
    assert "unseen_clock_ms" not in window


def _cpu_ns(pid: int) -> tuple[int, bool]:
    """The CPU time every thread of ``pid`` has run so far, in ns (the scheduler's own count),
    and whether every thread of it is stopped. A running thread's count is brought up to date
    only at a tick or a switch (no clock of another process's thread reads it sooner), so a
    thread still running when read shows its last stretch once it stops; a stopped thread's
    count is final."""
    total, stopped = 0, True
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/schedstat") as handle:
            total += int(handle.read().split()[0])
        with open(f"/proc/{pid}/task/{task}/stat") as handle:
            stopped &= handle.read().rsplit(")", 1)[1].split()[0] in ("T", "t")
    return total, stopped


def _sampled_window(early: str, pids, monkeypatch) -> tuple[dict, dict, dict, list]:
    """A reference (3 ms calls) and a candidate (1 ms, running ``early`` first) in one window,
    sampled every half millisecond meanwhile: (clock ns, the candidate's hold, the CPU ns of
    ``pids(controls)``, the reference's CPU ns, those pids, whether every thread of them is
    stopped). A hold is (pauses so far, paused), read under the candidate's lock so that a
    paused sample was taken after its stop signal was sent."""
    controls: dict = {}
    seen: list = []
    done = threading.Event()
    pause = Control.pause

    def counted_pause(self):
        self.pauses = getattr(self, "pauses", 0) + 1
        pause(self)

    monkeypatch.setattr(Control, "pause", counted_pause)

    def watch():
        while not done.is_set():
            try:
                candidate = controls["candidate"]
                with candidate._cond:
                    hold = (getattr(candidate, "pauses", 0), candidate.paused)
                    watched = tuple(pids(controls))
                    counts = [_cpu_ns(p) for p in watched]
                    taken = (time.monotonic_ns(), hold, sum(n for n, _ in counts),
                             _cpu_ns(controls["reference"].pid)[0], watched,
                             all(stopped for _, stopped in counts))
            except (OSError, KeyError, TypeError, IndexError, ValueError):  # not yet, or gone
                taken = None
            if taken is not None:
                seen.append(taken)
            time.sleep(0.0005)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        window, results = _window({"reference": 3.0, "candidate": 1.0}, cap_ms=1500,
                                  early={"candidate": early}, controls=controls)
    finally:
        done.set()
        watcher.join(5)
    return window, results, controls, seen


def _held_and_free(seen: list) -> dict:
    """Wall and CPU ns (the sampled processes', the reference's) summed over the stretches of
    samples inside one hold of the candidate, and over the rest (pairs of samples of the same
    processes only). A stretch of a hold counts from a sample that found every sampled thread
    stopped: the stop signal was sent before the hold's first sample, but a thread it finds
    waiting for a CPU (2 loaded cores) stops only once it takes one, and its count catches up
    then with what it ran before."""
    sums = {"held_wall": 0, "held_cpu": 0, "held_ref": 0, "free_wall": 0, "free_cpu": 0}
    for before, after in zip(seen, seen[1:]):
        if before[4] != after[4] or not after[4]:
            continue
        wall, cpu, ref = (after[0] - before[0], after[2] - before[2], after[3] - before[3])
        if before[1] == after[1] and after[1][1] and before[5]:
            sums["held_wall"] += wall
            sums["held_cpu"] += cpu
            sums["held_ref"] += ref
        elif not before[1][1] and not after[1][1]:
            sums["free_wall"] += wall
            sums["free_cpu"] += cpu
    return sums


def test_a_member_runs_nothing_in_another_members_turn(monkeypatch):
    """A member that leaves a thread spinning (to slow the reference's turns and so raise its
    own speedup: red-team round 30) is stopped, every thread of it, while another is timed."""
    spin = ("__import__('threading').Thread(target=exec, args=('while 1: pass',), "
            "daemon=True).start()")
    window, results, controls, seen = _sampled_window(
        spin, lambda controls: [controls["candidate"].pid], monkeypatch)
    assert window["error"] is None and window["others_stopped"], window
    assert all(r.ok for r in results.values()), results
    assert not any(c.paused for c in controls.values())  # every member let go at the end
    # while the parent holds the candidate stopped, no thread of it runs (a thread the stop
    # finds waiting for a CPU runs only the kernel's few µs of taking it); the reference is
    # timed meanwhile, and outside its holds the candidate's spinning thread does run
    sums = _held_and_free(seen)
    assert sums["held_wall"] >= 2e6, sums  # 2 ms of landed holds sampled
    assert sums["held_cpu"] <= 0.02 * sums["held_wall"], sums
    assert sums["held_ref"] >= 0.1 * sums["held_wall"], sums
    assert sums["free_cpu"] >= 0.15 * sums["free_wall"], sums


def test_a_child_that_left_the_members_group_is_stopped_with_it(monkeypatch):
    """``killpg`` misses a child that called ``setsid``: the window finds it (the run's token,
    its descent) as it begins to time, and stops it in the other members' turns too."""
    from kernelmill.validate.zygote_worker import children

    daemon = ("__import__('subprocess').Popen([__import__('sys').executable, '-c', "
              "'while 1: pass'], start_new_session=True)")
    window, _results, _controls, seen = _sampled_window(
        daemon, lambda controls: children(controls["candidate"].pid), monkeypatch)
    assert window["error"] is None and window["strays"] == {"candidate": 1}, window
    sums = _held_and_free(seen)
    assert sums["held_wall"] >= 2e6, sums
    assert sums["held_cpu"] <= 0.02 * sums["held_wall"], sums
    assert sums["free_cpu"] >= 0.15 * sums["free_wall"], sums


def _turns_after_their_own(names: list[str], rounds: int, how: str = "mirror") -> dict:
    """How many of each participant's turns came right after its own, over ``rounds``
    rounds in the window's order (``window_turns._round_order``, the same for any window)."""
    return {name: len(at) for name, at in _rounds_after_their_own(names, rounds, how).items()}


def _rounds_after_their_own(names: list[str], rounds: int, how: str = "mirror") -> dict:
    """The rounds where each participant's turn came right after its own."""
    own, order, last = {name: [] for name in names}, [], None
    for index in range(rounds):
        order = _round_order(list(names), index, how, order)
        for name in order:
            if name == last:
                own[name].append(index)
            last = name
    return own


def test_every_turn_settles_untimed_before_its_samples():
    """``settle_ms``: each turn starts with untimed work (a kernel at the power cap reads fast
    right after a lighter turn), sent with the turn's samples in one command; those calls are
    no samples. With ``settle_same`` off, a turn right after the same participant's own
    (mirrored rounds meet at their ends) does not settle."""
    unsettled, loose = _window({"reference": 2.0, "candidate": 1.0}, cap_ms=400, round_ms=1,
                               settle_ms=10, ci_target_pct=1.0, settle_same=False)
    assert unsettled["error"] is None and all(r.ok for r in loose.values()), loose
    own = _turns_after_their_own(["reference", "candidate"], unsettled["rounds"])
    assert unsettled["rounds"] >= 2 and sum(own.values()) >= 1, (unsettled["rounds"], own)
    for name, result in loose.items():
        assert result.value["settles"] == unsettled["rounds"] - own[name], (name, own)
    # each participant's summary names the rounds its turn ran unsettled
    assert {name: part["unsettled_rounds"] for name, part in
            unsettled["participants"].items()} == _rounds_after_their_own(
                ["reference", "candidate"], unsettled["rounds"])
    window, results = _window({"reference": 2.0, "candidate": 1.0}, cap_ms=400, round_ms=1,
                              settle_ms=10, ci_target_pct=1.0, settle_same=True,
                              settle_wait="spin")
    assert window["error"] is None and all(r.ok for r in results.values()), results
    # by default the settling is asleep
    assert WindowSettings().settle_wait == "sleep"
    # where a turn's time went, by the workers' stamps: the settling is its own part
    parts = window["turn_ms"]
    assert set(parts) == {"to_worker", "settle", "samples", "checks", "to_parent"}, parts
    assert parts["settle"] >= 10 and parts["samples"] >= 3 * 1.0 and \
        all(v >= 0 for v in parts.values()), parts
    for name, result in results.items():
        record = result.value
        assert record["settles"] == record["rounds"] == window["rounds"]
        assert record["settles_asleep"] == 0  # spinning: none asleep
        assert record["reps"] == window["participants"][name]["reps"] >= 3 * window["rounds"]
    assert window["window_ms"] >= window["rounds"] * 2 * 10  # two settles a round
    timing = verdict_timing(window)
    assert 1.5 <= timing["reference_ms"] / timing["candidate_ms"] <= 2.6, timing
    cand = window["participants"]["candidate"]
    assert 0.5 <= cand["mean_ms"] / cand["wall_ms"] <= 2.0, cand  # the clock check holds
    # ``settle_wait="sleep"``: the turns ask for the settling mostly asleep (a CPU timer has
    # no graph: its samples settle it, as with "spin"), and last as long
    asleep, results = _window({"reference": 2.0, "candidate": 1.0}, cap_ms=400, round_ms=1,
                              settle_ms=10, ci_target_pct=1.0, settle_wait="sleep")
    assert asleep["error"] is None and all(r.ok for r in results.values()), results
    assert asleep["turn_ms"]["settle"] >= 10
    own = _turns_after_their_own(["reference", "candidate"], asleep["rounds"])
    assert sum(own.values()) >= 1, own  # a window of two: no turn after its own settles
    assert all(r.value["settles"] == r.value["settles_asleep"] == asleep["rounds"] - own[name]
               for name, r in results.items())
    # a group: by default every turn settles, one right after its own too
    group, results = _window({"reference": 2.0, "candidate 0": 1.0, "candidate 1": 1.0},
                             cap_ms=400, round_ms=1, settle_ms=10, ci_target_pct=1.0)
    assert group["error"] is None and all(r.ok for r in results.values()), results
    names = ["reference", "candidate 0", "candidate 1"]
    assert group["rounds"] >= 2 and sum(_turns_after_their_own(names, group["rounds"]).values())
    assert all(r.value["settles"] == group["rounds"] for r in results.values())
    assert all(part["unsettled_rounds"] == [] for part in group["participants"].values())


def test_settle_if_held_settles_turns_only_once_nvml_shows_the_clocks_held_back():
    """``settle_if="held"``: while NVML's violation counters stand still (no power or thermal
    policy held the clocks back), no turn settles; a hold seen over the warm-up settles every
    turn; one first seen after a round starts the rounds over, settled, the unsettled samples
    dropped; no counter to read: settled. "always" settles whatever they say. A window keeps
    how long the clocks were held, and the verdict's timing says what was left unsettled."""
    ms = {"reference": 2.0, "candidate": 1.0}
    timing = {"cap_ms": 300, "round_ms": 1, "settle_ms": 10, "ci_target_pct": 1.0,
              "settle_same": True, "hot_s": 0}

    def counter(held_from: int | None, keeps: bool = True):
        """NVML readings whose ``held_ns`` is 0 before the reading ``held_from`` (1-based:
        the holds' first, after the warm-up, after each round; no clock warm-up reads them
        on CPU), 5 ms from it on; no ``held_ns`` at all without ``keeps``."""
        calls = [0]

        def read():
            calls[0] += 1
            got = {"busy_pct": 0, "sm_mhz": 1980, "max_sm_mhz": 1980}
            if keeps:
                got["held_ns"] = 0 if held_from is None or calls[0] < held_from else 5_000_000
            return got
        return read

    def settles(results):
        return {name: r.value["settles"] for name, r in results.items()}

    still, results = _window(ms, activity=counter(None), settle_if="held", **timing)
    assert still["error"] is None and all(r.ok for r in results.values()), results
    assert still["settled"] is False and still["clocks_held_ms"] == 0
    # no turn was asked to settle (each worker counts the settlings it ran; a bound on the
    # rounds' wall time read the host's load: 40.1 ms for 2 rounds on a busy 2-core host)
    assert settles(results) == {"reference": 0, "candidate": 0}
    assert verdict_timing(still)["settled"] is False
    warm, results = _window(ms, activity=counter(2), settle_if="held", **timing)
    assert warm["error"] is None and warm["settled"] is True and warm["clocks_held_ms"] == 5
    assert settles(results) == {"reference": warm["rounds"], "candidate": warm["rounds"]}
    later, results = _window(ms, activity=counter(3), settle_if="held", **timing)
    assert later["error"] is None and all(r.ok for r in results.values()), results
    assert later["settled_over"] == 1 and later["settled"] is True
    assert verdict_timing(later)["settled_over"] == 1
    for name, result in results.items():  # the first round's samples were dropped
        assert result.value["settles"] == later["rounds"] == result.value["rounds"] - 1
        assert later["participants"][name]["reps"] < result.value["reps"]
    unread, results = _window(ms, activity=counter(None, keeps=False), settle_if="held",
                              **timing)
    assert unread["error"] is None and unread["settled"] is True
    assert "clocks_held_ms" not in unread
    assert settles(results) == {"reference": unread["rounds"], "candidate": unread["rounds"]}
    always, results = _window(ms, activity=counter(None), settle_if="always", **timing)
    assert always["error"] is None and "settled" not in always and always["clocks_held_ms"] == 0
    assert settles(results) == {"reference": always["rounds"], "candidate": always["rounds"]}
    # a hold first read after the last round, the rounds unsettled: the timing is not precise
    parts = {n: {"ms": 1.0, "reps": 12, "method": "cuda_graph", "ci_pct": 0.2} for n in ms}
    calm = {"participants": parts, "ci_limit_pct": 5.0, "settled": False}
    assert verdict_timing(calm)["precise"] is True
    assert verdict_timing({**calm, "held_unsettled": True})["precise"] is False
    assert WindowSettings().settle_if == "held"
    with pytest.raises(ValueError, match="settle_if"):
        WindowSettings(settle_if="sometimes")


def test_the_unsettled_turns_are_read_apart_from_kept_verdicts(tmp_path):
    """``scripts/settle_bias.py`` reads the turns a window ran unsettled (the participants'
    ``unsettled_rounds``, kept in a verdict's profile) apart from the settled ones, each over
    its member's median turn."""
    import gzip
    import json
    import subprocess

    window, results = _window({"reference": 2.0, "candidate": 1.0}, cap_ms=400, round_ms=1,
                              settle_ms=10, ci_target_pct=1.0, min_rounds=4)
    assert window["error"] is None and all(r.ok for r in results.values()), results
    parts = window["participants"]
    profile = {"group": 1,
               "round_medians_ms": {who: parts[who]["round_medians_ms"] for who in parts},
               "unsettled_rounds": {who: parts[who]["unsettled_rounds"] for who in parts}}
    unsettled = {who: len(parts[who]["unsettled_rounds"]) for who in parts}
    assert sum(unsettled.values()) >= 1, unsettled
    with gzip.open(tmp_path / "v.jsonl.gz", "wt") as handle:
        handle.write(json.dumps({"problem_id": "p", "profile": profile}) + "\n")
    (tmp_path / "old.jsonl").write_text('{"problem_id": "p", "profile": {}}\n')  # skipped
    script = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "settle_bias.py")
    out = subprocess.run([sys.executable, script, str(tmp_path)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    rows = {line.split()[2]: line.split() for line in out.stdout.splitlines()
            if line.startswith("p ")}
    for who in parts:
        settled = len(parts[who]["round_medians_ms"]) - unsettled[who]
        assert rows[who][3] == f"{unsettled[who]}/{settled}", (who, out.stdout)


def test_long_calls_fill_the_minimum_rounds_with_longer_turns():
    """``min_rounds``: a call too long for 3 samples in a turn gets ``min_reps / min_rounds``
    of them, so the window may stop after ``min_rounds`` rounds (half the settled turns of the
    floor of three); shorter calls keep the turns ``round_ms`` holds; and no window stops
    before ``min_rounds``, however many samples a turn holds."""
    long = {"reference": 6.0, "candidate": 5.0}
    always = 1e6  # a CI target every reading meets: the rounds are the sizes' alone
    floor, _ = _window(long, cap_ms=2000, ci_target_pct=always, min_rounds=0)
    fewer, _ = _window(long, cap_ms=2000, ci_target_pct=always)  # the default: two
    assert floor["error"] is None and fewer["error"] is None
    assert floor["rounds"] == 4 and fewer["rounds"] == 2, (floor["rounds"], fewer["rounds"])
    for window in (floor, fewer):
        assert all(p["reps"] == 12 for p in window["participants"].values()), window
    short, _ = _window({"reference": 0.2, "candidate": 0.2}, cap_ms=2000, ci_target_pct=always,
                       round_ms=5, min_rounds=3)
    assert short["error"] is None and short["rounds"] == 3, short["rounds"]
    # a turn that holds 3 samples or more keeps them: 5 of 2 ms in 10 ms, three rounds for 12
    medium, _ = _window({"reference": 2.0, "candidate": 2.0}, cap_ms=2000,
                        ci_target_pct=always, round_ms=10)
    # (at least three: a long call's turn would hold 6 and stop after two; a host busy enough to
    # slow the 2 ms samples fits fewer in a turn, and more rounds)
    assert medium["error"] is None and medium["rounds"] >= 3, medium["rounds"]
    # past the cap the window still makes its minimum rounds, and a turn of a call too long
    # for them in the cap keeps 3 samples: two rounds of 3, not one of 6
    capped, _ = _window({"reference": 30.0, "candidate": 30.0}, cap_ms=100,
                        ci_target_pct=always, ci_limit_pct=1e6)
    assert capped["error"] is None and capped["rounds"] == 2, capped["rounds"]
    assert all(p["reps"] == 6 for p in capped["participants"].values()), capped


def test_mirrored_rounds_reverse_each_drawn_order():
    """``order="mirror"``: each odd round is the round before it reversed, so over a pair a
    member's turns sit about the pair's middle; even rounds are drawn as "shuffle" draws."""
    from kernelmill.validate.window_turns import _round_order
    names = [f"m{i}" for i in range(8)]
    last: list[str] = []
    orders = []
    for index in range(6):
        last = _round_order(list(names), index, "mirror", last)
        orders.append(last)
    for even, odd in zip(orders[::2], orders[1::2]):
        assert odd == even[::-1]
        positions = {name: even.index(name) + odd.index(name) for name in names}
        assert set(positions.values()) == {len(names) - 1}
    assert len({tuple(o) for o in orders[::2]}) > 1  # the drawn rounds differ
    assert orders[0] == _round_order(list(names), 0, "shuffle", [])
    assert _round_order(list(names), 1, "shuffle", orders[0]) != orders[0][::-1]
    # a member that left: the next round is drawn, not mirrored
    assert sorted(_round_order(names[:-1], 1, "mirror", orders[0])) == sorted(names[:-1])


def test_a_participant_with_a_wide_ci_gets_rounds_past_the_cap():
    """Past the cap, rounds go on (up to ``overtime`` times the cap more) while a participant's
    CI is wider than ``ci_limit_pct``; a timing that stays wider says ``precise: false``."""
    noisy = "import random; timer.sample = lambda: (busy(), random.uniform(0.5, 4.0))[1]"
    window, results = _window({"reference": 1.0, "candidate": 1.0}, cap_ms=150, overtime=2.0,
                              ci_limit_pct=5.0, cheats={"candidate": noisy})
    assert window["error"] is None and all(r.ok for r in results.values()), results
    assert window["overtime_ms"] > 0 and window["window_ms"] >= 150
    timing = verdict_timing(window)
    assert timing["ci_pct"] > 5.0 and timing["precise"] is False, timing
    quiet, _ = _window({"reference": 1.0, "candidate": 1.0}, cap_ms=150, ci_limit_pct=1e6)
    assert quiet["overtime_ms"] == 0 and verdict_timing(quiet)["precise"] is True


def test_a_graph_sized_again_in_the_warm_up_turn_is_what_the_window_records():
    """A worker estimates one call during its warm-up turn, alone on the GPU
    (``Timer.planned_calls``), and asks for the count it wants; the members that asked then
    capture side by side (``Timer.resize``): the window's record of each (calls per sample,
    estimate) is the new one, which the clock check and the rounds' sizes then use."""
    asks = ("timer.planned_calls = lambda: (setattr(timer, 'estimate_ms', 0.5), 2)[1]; "
            "import time as clock; "
            "timer.resize = lambda calls=None: (clock.sleep(0.1), "
            "setattr(timer, 'calls_per_sample', calls), True)[2]")
    window, results = _window({"reference": 1.0, "candidate": 1.0, "other": 1.0}, cap_ms=300,
                              warm_ms=5, cheats={"candidate": asks, "other": asks})
    assert window["error"] is None and all(r.ok for r in results.values()), results
    parts = window["participants"]
    for name in ("candidate", "other"):
        assert parts[name]["resized"] and parts[name]["calls_per_sample"] == 2
        assert parts[name]["estimate_ms"] == 0.5
        assert parts[name]["prepared_calls"] == 1  # the count its preparation captured
    assert not parts["reference"].get("resized") and parts["reference"]["calls_per_sample"] == 1
    assert "prepared_calls" not in parts["reference"]
    # the captures again (100 ms each, side by side) are a phase of their own, apart from the
    # warm-up; a window with none has no such phase
    phases = window["phases_ms"]
    assert phases["resize"] >= 100 > phases["warm"], phases
    plain, _ = _window({"reference": 1.0, "candidate": 1.0}, cap_ms=100, warm_ms=5)
    assert "resize" not in plain["phases_ms"]


@pytest.mark.gpu
def test_a_graph_sized_from_a_bad_estimate_is_sized_again():
    """A graph of one call counts a replay's fixed cost (several µs) as the call's: what a
    graph sized from an estimate taken under contention gets. ``resize`` alone on the GPU
    captures the count a fresh estimate asks for and the small kernel reads its own time."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    x = torch.randn(4096, device="cuda")
    timer = T.Timer(lambda: x * 2.0, "cuda")
    timer.prepare()
    good = timer.calls_per_sample
    assert good >= 64, timer.describe()
    timer.graph, timer.output = timer._captured(timer._stream, 1)  # as if estimated large
    timer.calls_per_sample = 1
    one = statistics.median(timer.round(30))
    # a fresh estimate of a ~1 µs call may land on either side of a power of two (512 or 1024
    # calls on an H100), so the count is the first estimate's within a factor of two
    assert timer.resize() and good // 2 <= timer.calls_per_sample <= 2 * good, \
        (good, timer.calls_per_sample)
    sized = statistics.median(timer.round(30))
    assert sized < 0.6 * one, (sized, one)
    assert torch.equal(timer.replay(), x * 2.0)


def test_window_parent_clock_sees_through_a_forged_timer():
    window, _ = _window({"reference": 1.0, "candidate": 2.0}, cheat=CHEAT, cap_ms=300)
    cand = window["participants"]["candidate"]
    assert cand["ms"] == pytest.approx(1e-3) and cand["wall_ms"] > 1.8


def test_window_parent_clock_is_not_fooled_by_the_parents_own_latency():
    # An honest worker whose loop answers arrive 40 ms late (a busy parent with many graders):
    # the latency is not the worker's time; the loop is rerun longer instead of blaming it.
    late = "slow = timer.loop; timer.loop = lambda n: (time.sleep(0.04), slow(n))[1]"
    window, _ = _window({"reference": 1.0, "candidate": 1.0}, cheat=late, cap_ms=300)
    cand = window["participants"]["candidate"]
    assert window["error"] is None and cand["wall_ms"] >= 0.9, cand
    assert cand["mean_ms"] / cand["wall_ms"] >= 0.6, cand


def test_graph_calls_are_a_stable_power_of_two():
    from kernelmill.validate.timer import graph_calls

    # a small kernel whose estimate jitters by 30% still gets the same graph
    assert {graph_calls(1.0, ms, 1024) for ms in (0.0007, 0.0009, 0.0005)} == {1024}
    assert graph_calls(1.0, 0.003, 1024) == 512  # 334 calls wanted
    assert graph_calls(1.0, 0.05, 1024) == 32
    assert graph_calls(1.0, 2.0, 1024) == 1
    assert all(n & (n - 1) == 0 for n in (graph_calls(1.0, x / 1000, 1024)
                                          for x in range(1, 3000, 7)))


def test_outputs_of_captured_calls_may_not_share_memory():
    """The timing graph holds every call's output: fresh outputs never overlap, while a kept
    buffer returned again, or views of one storage, do (the graph then holds one call)."""
    fresh = [torch.randn(64) for _ in range(4)]
    assert not M.outputs_overlap(fresh)
    assert not M.outputs_overlap([(t, t * 2) for t in fresh])  # one call's own tensors
    kept = torch.randn(64)
    assert M.outputs_overlap([kept, torch.randn(64), kept])
    whole = torch.randn(4, 64)
    assert M.outputs_overlap([whole[0], whole[1]])  # views of one storage
    assert M.outputs_overlap([(torch.randn(8), whole), (whole[3], torch.randn(8))])
    assert M.output_bytes((torch.empty(10), torch.empty(3, dtype=torch.float64))) == 64


def test_calls_that_left_part_of_the_work_to_others_disagree():
    """Round 20's ``graph_three_fifths`` in miniature: each call wrote 3 of 5 slices of its
    output; after new inputs, the slices it left hold the old answer. Judged element by
    element: a call loose only where values are small is off too."""
    old, new = torch.arange(10.0), torch.arange(10.0) * 3
    tolerance = (1e-4, 1e-4)
    honest = [new.clone() for _ in range(4)]
    assert M.calls_disagree(honest, tolerance) == {"calls": 4}
    partial = [new.clone() for _ in range(4)]
    partial[1][6:] = old[6:]
    report = M.calls_disagree(partial, tolerance)
    assert report["call"] == 1 and report["off"] == 4
    assert report["max_abs"] == 18.0 and report["scale"] == 27.0
    rounding = [new + 1e-7 * i for i in range(3)]  # a nondeterministic kernel: rounding only
    assert M.calls_disagree(rounding, tolerance)["off"] == 0
    loose = [new.clone() for _ in range(3)]  # within 1e-4 of the largest value, not of each
    loose[0][1] += 2e-3
    assert M.calls_disagree(loose, tolerance)["off"] == 1
    both_nan = [torch.tensor([float("nan"), 1.0]) for _ in range(2)]
    assert M.calls_disagree(both_nan, tolerance) == {"calls": 2}
    one_nan = [torch.tensor([float("nan"), 1.0]), torch.tensor([0.0, 1.0])]
    assert M.calls_disagree(one_nan, tolerance)["off"] == 1
    assert M.calls_disagree([(new,), new], tolerance)["max_abs"] == float("inf")
    # one word size for both tensors, whatever their offsets
    base = torch.arange(12, dtype=torch.float32)
    assert M.same_bits(base[1:9], base[1:9].clone()) and not M.same_bits(base[1:9], base[2:10])
    # past the first words compared alone: a difference at either end is found
    long = torch.randn(4 * M.SAME_BITS_HEAD + 3)
    for index in (0, M.SAME_BITS_HEAD - 1, M.SAME_BITS_HEAD, long.numel() - 1):
        other = long.clone()
        other[index] = -other[index]
        assert not M.same_bits(long, other), index
    assert M.same_bits(long, long.clone())
    zeros = torch.zeros(4 * M.SAME_BITS_HEAD)
    assert not M.same_bits(zeros, -zeros)  # signed zeros differ in their bits


def test_bytes_in_pieces_are_the_sent_tensors_only_when_all_of_them_are():
    sent = torch.randn(1000, dtype=torch.float64)
    flat = sent.view(torch.uint8)

    def cut(data, sizes):
        at = 0
        for size in sizes:
            yield data[at:at + size].clone()
            at += size

    assert M.same_bytes_in_pieces(cut(flat, [8000]), sent)
    assert M.same_bytes_in_pieces(cut(flat, [4096, 3000, 904]), sent)
    assert not M.same_bytes_in_pieces(cut(flat, [4096, 3000]), sent)  # short
    assert not M.same_bytes_in_pieces(cut(torch.cat([flat, flat[:8]]), [4096, 3912]), sent)
    changed = flat.clone()
    changed[7999] ^= 1
    assert not M.same_bytes_in_pieces(cut(changed, [4096, 3904]), sent)
    assert M.same_bytes_in_pieces(cut(sent.t().contiguous().view(torch.uint8), [8000]), sent)


def test_same_bits_finds_a_difference_in_any_chunk(monkeypatch):
    """Compared chunk by chunk past the first words: a difference at a chunk's first or last
    word, or in a short last chunk, is found; NaN payloads count as bits."""
    monkeypatch.setattr(M, "SAME_BITS_CHUNK", 100)
    long = torch.randn(M.SAME_BITS_HEAD + 1000 + 37, dtype=torch.float64)
    assert M.same_bits(long, long.clone())
    for index in (M.SAME_BITS_HEAD, 599, 600, 999, 1000, long.numel() - 1):
        other = long.clone()
        other[index] += 1
        assert not M.same_bits(long, other), index
    nans = torch.full((4 * M.SAME_BITS_HEAD,), float("nan"))
    payload = nans.clone()
    payload.view(torch.int32)[-1] += 1  # another NaN, other bits
    assert torch.isnan(payload).all() and not M.same_bits(nans, payload)
    assert M.same_bits(nans, nans.clone())


def test_judge_refuses_a_graph_whose_calls_disagree():
    from kernelmill.grade.judge import _graph_calls_agree

    def judged(agree):
        hacks = []
        _graph_calls_agree(agree, lambda code, why: hacks.append((code, why)))
        return hacks

    assert judged({"calls": 64}) == []
    assert judged({"calls": 64, "call": 3, "off": 0, "max_abs": 1e-6, "scale": 10.0}) == []
    assert judged({"calls": 64, "call": 3, "off": 4, "max_abs": 18.0, "scale": 27.0})[0][0] == \
        "timing_behaviour"
    assert judged({"calls": 2, "call": 0, "off": 1, "max_abs": float("inf"), "scale": 0.0})
    assert judged(None) and judged({"calls": "64"})  # unreadable fails
    assert judged({"calls": 64, "call": 3, "max_abs": 1e-6, "scale": 10.0})  # no count of off


def test_calls_of_a_noisy_records_graph_agree_within_the_judges_scaled_floor():
    """The replays' call-by-call comparison counts elements off with the tolerance as sent;
    the judge takes as agreeing a gap that ``compare``'s own floor, scaled by the output's
    spread for a noisy record (``agreement_slack``), would not tell apart: an honest kernel
    summing in another order from call to call at a scaled trial (x * 32 + 64) is not a
    slicer, and a call that left part of its output undone still is."""
    from kernelmill.grade.checks.probes import agreement_slack, graph_calls_agree
    torch.manual_seed(0)
    a, b = torch.randn(256, 2048) * 32 + 64, torch.randn(2048, 256)
    reference = a @ b
    reordered = (a[:, 700:] @ b[700:]) + (a[:, :700] @ b[:700])  # another summation order
    noisy = 2e-4  # a record whose calibrated atol is over float32's floor (1e-4)
    tolerance = (noisy, 1e-5)
    honest = M.calls_disagree([reordered, reference], tolerance)
    assert honest.get("off"), honest  # the raw atol counts rounding near zero as off
    sliced = reference.clone()
    sliced[:, :32] = 0
    slicer = M.calls_disagree([sliced, reference], tolerance)
    slack = agreement_slack([reference], noisy)
    assert noisy < slack < 1.0, slack
    assert agreement_slack([reference], 1e-4) == 1e-4  # at the floor nothing grows

    def judged(agree, slack):
        hacks = []
        graph_calls_agree(agree, lambda code, why: hacks.append(code), slack=slack)
        return hacks

    assert judged(honest, slack) == [] and judged(honest, 0.0) == ["timing_behaviour"]
    assert judged(slicer, slack) == ["timing_behaviour"]
    # a decoy call with noise just under the slack at every element, beside calls that each
    # left a slice undone (fewer elements off, so not the call reported): still refused
    decoy = reference + 0.9 * slack * torch.sign(torch.randn_like(reference))
    partial = reference.clone()
    partial[:, :8] = 0
    many = M.calls_disagree([partial, decoy, partial, reference], tolerance)
    assert many["call"] == 1 and many["max_abs"] < slack and many["gap_all"] > slack, many
    assert judged(many, slack) == ["timing_behaviour"]
    assert judged(M.calls_disagree([decoy, reordered, reference], tolerance), slack) == []
    # integer outputs must agree exactly, whatever the slack
    counts = torch.arange(64)
    mixed = M.calls_disagree([(reordered, counts + 1), (reference, counts)], tolerance)
    assert mixed["exact_off"] == 1 and judged(mixed, 1e9) == ["timing_behaviour"]
    assert judged({k: v for k, v in honest.items() if k != "gap_all"}, slack) == \
        ["timing_behaviour"]  # a report without the overall gap: no slack


def test_window_reports_a_participant_that_dies():
    window, results = _window({"reference": 1.0, "candidate": 1.0},
                              cheat="import os; os._exit(3)", ready_timeout_s=60)
    assert window["error"]["participant"] == "candidate"
    assert verdict_timing(window) is None
    assert results["reference"].ok  # told to stop, it ends cleanly


def test_a_group_window_times_every_candidate_and_drops_the_ones_that_fail():
    # Three candidates of one problem in one window beside one reference: one dies after it
    # said it was ready, one before; the window goes on for the one left, against the same
    # reference samples, and says why the others left.
    # ("1/0" ms: its timer fails while it prepares, before it says it is ready)
    window, results = _window(
        {"reference": 2.0, "candidate a": 1.0, "candidate b": 1.0, "candidate c": "1/0",
         "candidate d": 1.0},
        cheats={"candidate b": "import os; os._exit(3)"}, cap_ms=600, ci_target_pct=2.0,
        droppable=("candidate a", "candidate b", "candidate c", "candidate d"))
    assert window["error"] is None, window["error"]
    assert set(window["dropped"]) == {"candidate b", "candidate c"}, window["dropped"]
    for name in ("candidate a", "candidate d"):
        timing = verdict_timing(window, candidate=name)
        assert timing["reps"] >= 12 and 1.4 <= timing["reference_ms"] / timing["candidate_ms"] \
            <= 2.8, (name, timing)
        assert window["participants"][name]["wall_ms"] >= 0.9
    assert window["participants"]["candidate b"]["ms"] is None
    assert not results["candidate c"].ok and "ZeroDivisionError" in str(results["candidate c"].error)
    assert results["reference"].ok and results["candidate a"].ok


def test_waiting_for_a_slower_group_member_is_not_a_members_own_time():
    # Each worker may run 6 s; one member takes 3 s more than the others to get ready (half of it before it asks for the GPU), then
    # the window runs 4 s: the members ready at once waited on its account, and every one
    # waited through the others' turns; none may run out of time for that.
    window, results = _window(
        {"reference": 1.0, "candidate a": 1.0, "candidate slow": 1.0},
        before={"candidate slow": "time.sleep(1.5)"}, early={"candidate slow": "time.sleep(1.5)"},
        timeout_s=6, cap_ms=4000,
        ci_target_pct=0.0, max_reps=10**6, droppable=("candidate a", "candidate slow"))
    assert window["error"] is None and not window["dropped"], window
    assert all(r.ok for r in results.values()), {k: r.error for k, r in results.items()}
    assert window["window_ms"] >= 3500 and min(r.wall_s for r in results.values()) > 6


def test_one_members_turn_alone_moves_the_other_members_time_limits():
    # warm-up, clock check and unseen check are one member's turn at a time: with 8 members
    # (one a slow hostile case) the others' limits must move on by that turn (on an H100 a
    # member timed out at 60 s, 49 s of it in the window)
    import time

    from kernelmill.validate.window_group import _Group

    class Control:
        def __init__(self):
            self.extended = 0.0

        def extend(self, seconds):
            self.extended += seconds

    controls = {name: Control() for name in ("reference", "candidate 0", "candidate 1")}
    group = _Group(controls, ("candidate 0", "candidate 1"), {"dropped": {}})
    turn = time.monotonic() - 2.0
    group.credit_others("candidate 0", turn)
    assert controls["candidate 0"].extended == 0.0
    assert controls["reference"].extended >= 2.0 and controls["candidate 1"].extended >= 2.0


def test_waiting_for_the_gpu_held_by_another_window_is_not_a_members_time(tmp_path):
    # Another window holds the GPU exclusively for 7 s; each worker may run 5 s. The wait (for
    # the shared lock before any GPU work, or the exclusive one before the rounds) is credited
    # while it lasts: credited only at its end, the workers were killed first.
    path = str(tmp_path / "gpu.lock")
    holding, release = threading.Event(), threading.Event()

    def other_window():
        with M.GpuLock(path).exclusive():
            holding.set()
            release.wait(7)

    holder = threading.Thread(target=other_window)
    holder.start()
    holding.wait(10)
    try:
        window, results = _window({"reference": 1.0, "candidate": 1.0}, timeout_s=5,
                                  lock=path, cap_ms=300, droppable=("candidate",))
    finally:
        release.set()
        holder.join()
    assert window["error"] is None and not window["dropped"], window
    assert window["shared_wait_ms"] + window["exclusive_wait_ms"] >= 5000
    assert all(r.ok for r in results.values()), {k: r.error for k, r in results.items()}
    assert verdict_timing(window) is not None


def test_a_member_that_skips_its_settling_or_sends_no_numbers_leaves_the_window_alone():
    """A turn answered sooner than the settling asked cannot have settled (its pace would read
    low, and the pace bounds the clock check's loop); a round of samples that are not numbers
    is no round. Either drops that member; the others are timed as before."""
    skip = "timer.warm = lambda ms: 0"
    garbage = "timer.round = lambda reps: ['fast'] * int(reps)"
    for cheat, said in ((skip, "before the 100 ms of settling"), (garbage, "without its samples")):
        window, results = _window({"reference": 1.0, "candidate": 1.0, "candidate b": 1.0},
                                  cheats={"candidate": cheat}, cap_ms=600, settle_ms=100,
                                  droppable=("candidate", "candidate b"), ci_target_pct=1.0)
        assert window["error"] is None, window["error"]
        assert set(window["dropped"]) == {"candidate"}, window["dropped"]
        assert said in str(window["dropped"]["candidate"]), window["dropped"]
        assert window["participants"]["candidate b"]["reps"] >= 3, window["participants"]


def test_a_window_whose_candidates_all_fail_never_takes_the_gpu_alone():
    window, results = _window({"reference": 1.0, "candidate": "1/0"},
                              droppable=("candidate",), ready_timeout_s=60)
    assert window["error"] is None and "candidate" in window["dropped"]
    assert window["rounds"] == 0 and window.get("exclusive_wait_ms") is None
    assert results["reference"].ok  # told to stop, it ends cleanly


# ---------------------------------------------------------------- on the GPU

@pytest.mark.gpu
def test_cuda_graph_timer_replays_what_it_captured():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    a = torch.randn(2048, 2048, device="cuda")
    timer = T.Timer(lambda: a @ a, "cuda")
    info = timer.prepare()
    assert info["method"] == "cuda_graph" and info["capture_error"] is None, info
    first = timer.replay().clone()
    a.copy_(torch.randn_like(a))  # refill the captured input in place
    assert torch.allclose(timer.replay(), a @ a) and not torch.allclose(first, a @ a)
    result = T.measure(lambda: a @ a, "cuda")
    assert result["method"] == "cuda_graph" and result["ci_pct"] <= 2.0, result
    events = T.measure(lambda: a @ a, "cuda", graph=False)
    assert events["method"] == "cuda_events"
    assert 0.7 <= events["ms"] / result["ms"] <= 1.5, (events, result)


@pytest.mark.gpu
def test_a_sleep_covered_or_queued_graph_sample_reads_as_a_replay_covered_one_in_less_time():
    """``cover``: a spin kernel queued before the timed replay hides its launch as an untimed
    replay does, as do replays queued back to back behind one; the times agree, for a call of
    microseconds and one of milliseconds, and their rounds take less time."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    for n in (256, 4096):
        a = torch.randn(n, n, device="cuda")
        timers = {cover: T.Timer(lambda: a @ a, "cuda", cover=cover)
                  for cover in ("replay", "sleep", "queued")}
        walls, medians = {}, {}
        for cover, timer in timers.items():
            info = timer.prepare()
            assert info["method"] == "cuda_graph" and info["cover"] == cover, info
            timer.warm(100.0)
        for _ in range(3):  # interleaved, so drift hits both
            for cover, timer in timers.items():
                began = time.perf_counter()
                medians.setdefault(cover, []).extend(timer.round(20))
                walls[cover] = walls.get(cover, 0.0) + time.perf_counter() - began
        replay = statistics.median(medians["replay"])
        for cover in ("sleep", "queued"):  # alike, in less device time
            assert 0.95 <= statistics.median(medians[cover]) / replay <= 1.05, \
                (n, cover, replay, medians[cover])
            assert walls[cover] < 0.8 * walls["replay"], (n, walls)


def test_the_sleep_cover_calls_the_builtin_bound_at_import():
    """``torch.cuda._sleep`` looks ``torch._C._cuda_sleep`` up at each call: the timer binds
    the builtin itself, and a replaced one is reported (``GUARDED``)."""
    builtin = getattr(torch._C, "_cuda_sleep", None)
    assert M._cuda_sleep is builtin and T._cuda_sleep is builtin
    assert ((torch._C, "_cuda_sleep") in M.GUARDED) is (builtin is not None)


def test_a_timer_takes_a_known_cover_and_falls_back_to_the_default():
    assert T.Timer(lambda: None, "cpu", cover="sleep").cover == "sleep"
    assert T.Timer(lambda: None, "cpu", cover="something").cover == T.COVER
    timer = T.Timer(lambda: None, "cpu", cover="sleep")
    assert "cover" not in timer.prepare()  # perf_counter: no graph, nothing to cover
    from kernelmill.grade.worker.timing import _timer_options

    assert _timer_options({"timing_settings": {"cover": "sleep", "settle_ms": 5}}) == \
        {"cover": "sleep", "spare": True, "gate": True}


def test_the_default_cover_queues_only_long_graph_samples():
    """"auto": a round's samples queue back to back where a graph sample is
    ``QUEUE_SAMPLE_MS`` or more (a KernelBench forward), else each follows an untimed replay
    (a kernel of microseconds at the power cap read its reference steadier with the gaps);
    the description says which, and no graph means no cover."""
    assert T.COVER == "auto"
    timer = T.Timer(lambda: None, "cpu")
    assert not timer.queues()  # no graph
    timer.method, timer.calls_per_sample = "cuda_graph", 4
    timer.estimate_ms = T.QUEUE_SAMPLE_MS / 4
    assert timer.queues() and timer.describe()["cover"] == "queued"
    timer.estimate_ms = T.QUEUE_SAMPLE_MS / 8
    assert not timer.queues() and timer.describe()["cover"] == "replay"
    timer.cover = "queued"
    assert timer.queues()
    timer.cover = "sleep"
    assert not timer.queues() and timer.describe()["cover"] == "sleep"


@pytest.mark.gpu
def test_a_long_graph_call_is_sized_from_one_replay():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    a = torch.randn(8192, 8192, device="cuda")  # a matmul of several ms: one call per sample
    replays = []
    real = TG._graph_replay
    try:
        TG._graph_replay = lambda graph: (replays.append(graph), real(graph))[1]
        timer = T.Timer(lambda: a @ a, "cuda")
        info = timer.prepare()
    finally:
        TG._graph_replay = real
    assert info["method"] == "cuda_graph" and timer.calls_per_sample == 1, info
    assert timer.estimate_ms >= TG.LONG_REPLAY_SAMPLES * timer.sample_ms, info
    assert len(replays) <= 4, len(replays)  # no eight-call graph and its 15 replays
    ms, _ = timer.once(lambda: a @ a)
    assert 0.5 <= timer.estimate_ms / ms <= 2.0, (timer.estimate_ms, ms)


@pytest.mark.gpu
def test_a_large_output_is_never_held_more_times_than_the_timing_graph_may():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    x = torch.randn(T.HELD_OUTPUT_BYTES // 4 // 2 + 1024, device="cuda")  # over half the bytes
    timer = T.Timer(lambda: x * 2.0, "cuda")
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    info = timer.prepare()
    assert info["method"] == "cuda_graph" and timer.calls_per_sample == 1, info
    held = torch.cuda.max_memory_allocated() - before
    assert held < 6 * x.numel() * 4, held  # not eight outputs for the sizing graph


@pytest.mark.gpu
def test_an_output_over_the_graph_limit_is_timed_without_a_graph():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    x = torch.randn(1 << 22, device="cuda")  # a 16 MiB output
    torch.cuda.synchronize()
    before = torch.cuda.memory_reserved()
    timer = T.Timer(lambda: x * 2.0, "cuda", graph_output_bytes=(1 << 24) - 1)
    info = timer.prepare()
    assert info["method"] == "cuda_events" and timer.graph is None, info
    assert torch.cuda.memory_reserved() - before <= 4 * x.numel() * 4  # no graph pool
    assert T.Timer(lambda: x * 2.0, "cuda", graph_output_bytes=1 << 24).prepare()["method"] \
        == "cuda_graph"


@pytest.mark.gpu
def test_uncapturable_forward_falls_back_to_events():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    x = torch.randn(1 << 20, device="cuda")
    result = T.measure(lambda: x * float(x.sum().item()), "cuda")  # a host sync
    assert result["method"] == "cuda_events" and result["capture_error"], result
    side = torch.cuda.Stream()

    def unjoined():  # work left on a side stream: must still be timed (device-wide sync)
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(20):
                x.mul_(1.0)

    slow = T.measure(unjoined, "cuda")
    assert slow["method"] == "cuda_events", slow
    plain = T.measure(lambda: [x.mul_(1.0) for _ in range(20)], "cuda")
    assert slow["ms"] > 0.5 * plain["ms"], (slow, plain)


def test_members_waiting_behind_a_member_that_hangs_first_in_line_are_not_killed_with_it():
    # The first member in the window's order hangs before it asks for the GPU until its own
    # 5 s limit kills it; the others asked at once and wait for it. Their wait is credited
    # though their turn in the order has not come (on an H100 they were killed with it).
    window, results = _window(
        {"reference": 1.0, "candidate hangs": 1.0, "candidate a": 1.0, "candidate b": 1.0},
        before={"candidate hangs": "time.sleep(30)"}, timeout_s=5, cap_ms=300,
        droppable=("candidate hangs", "candidate a", "candidate b"))
    assert "candidate hangs" in window["dropped"] and window["error"] is None, window
    assert "timed out" in str(results["candidate hangs"].error)
    for name in ("reference", "candidate a", "candidate b"):
        assert results[name].ok, (name, results[name].error)
        assert verdict_timing(window, candidate=name if name != "reference" else "candidate a")


def _try_lock(path: str, kind: int) -> bool:
    import fcntl

    with open(path, "rb") as handle:
        try:
            fcntl.flock(handle, kind | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(handle, fcntl.LOCK_UN)
        return True


def test_an_exclusive_hold_downgrades_to_shared_with_no_gap(tmp_path):
    import fcntl

    path = str(tmp_path / "gpu.lock")
    with M.GpuLock(path).exclusive() as held:
        assert not _try_lock(path + ".main", fcntl.LOCK_SH)
        held.downgrade()
        # shared now: other checks may run, no other window may start
        assert _try_lock(path + ".main", fcntl.LOCK_SH)
        assert not _try_lock(path + ".main", fcntl.LOCK_EX)
        assert _try_lock(path + ".turn", fcntl.LOCK_EX)
    assert _try_lock(path + ".main", fcntl.LOCK_EX)


def test_the_checks_after_a_window_run_under_the_gpu_lock_after_waiting_windows(tmp_path):
    # Told to stop, a window's workers go on to their checks after the window (GPU work, here
    # 1 s). A window already waiting goes first, back to back with this one; the checks run
    # after it and never inside it (on an H100, checks that ran inside another window read its
    # honest 1 us kernels 1.5x slow).
    path = str(tmp_path / "gpu.lock")
    got = {}

    def other_window():
        import fcntl

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # asks while this window times
            if os.path.exists(path + ".main") and not _try_lock(path + ".main", fcntl.LOCK_SH):
                break
            time.sleep(0.01)
        with M.GpuLock(path).exclusive():
            got["from"] = time.time()
            time.sleep(0.5)
            got["to"] = time.time()

    other = threading.Thread(target=other_window)
    other.start()
    after = "record['began'] = time.time(); time.sleep(1.0)"
    window, results = _window({"reference": 1.0, "candidate": 1.0}, lock=path, cap_ms=2500,
                              ci_target_pct=0.0, max_reps=10**6, after={"candidate": after})
    other.join(10)
    assert window["error"] is None and all(r.ok for r in results.values()), results
    # the waiting window ran first, whole, and the checks after it
    assert got["to"] <= results["candidate"].value["began"], (got, results["candidate"].value)


def _other_window(path: str, got: dict, hold_s: float = 0.3,
                  shared: bool = True) -> threading.Thread:
    """Another grade's window on the lock at ``path``: it asks once a window's group holds the
    GPU (shared, else exclusively) and records when it held it alone."""
    import fcntl

    def run():
        deadline = time.monotonic() + 60
        held = fcntl.LOCK_EX if shared else fcntl.LOCK_SH  # what a holder keeps one from
        while time.monotonic() < deadline:
            if os.path.exists(path + ".main") and not _try_lock(path + ".main", held):
                break
            time.sleep(0.005)
        time.sleep(0.05)
        with M.GpuLock(path).exclusive():
            got["from"] = time.time()
            time.sleep(hold_s)
            got["to"] = time.time()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


# A member's checks: ``first`` s of work, a point of stepping aside (when it was reached and
# left: ``marks``), then ``then`` s of work
POINT = ("marks = [time.time()]; busy_until = time.time() + {first}\n"
         "    while time.time() < busy_until: pass\n"
         "    marks.append(time.time()); went = W.step_aside_point(receive, report)\n"
         "    marks.append(time.time()); busy_until = time.time() + {then}\n"
         "    while time.time() < busy_until: pass")
MARKS = "record['marks'] = marks; record['went'] = went"


def test_a_window_waiting_goes_in_at_a_members_point_of_stepping_aside(tmp_path):
    # A member of a window checks (0.6 s of work in two pieces, a point of stepping aside
    # between them) while the parent holds the GPU shared for the group. Another window that
    # asks meanwhile goes in at that point, whole, not after all of the member's checks; the
    # member runs nothing while it times, and its time limit moves on by its wait.
    path, got, controls = str(tmp_path / "gpu.lock"), {}, {}
    other = _other_window(path, got)
    window, results = _window({"reference": 1.0, "candidate": 1.0}, lock=path, cap_ms=200,
                              early={"candidate": POINT.format(first=0.3, then=0.3)},
                              after={"candidate": MARKS}, controls=controls)
    other.join(10)
    assert window["error"] is None and all(r.ok for r in results.values()), results
    first_piece_end, kept_until = results["candidate"].value["marks"][1:3]
    assert first_piece_end <= got["from"] and got["to"] <= kept_until, (got, kept_until)
    assert window["stepped_aside"]["times"] == 1 and results["candidate"].value["went"]
    assert controls["candidate"].waited_s >= 0.25  # the other window's 0.3 s
    # when the step was, and in which of the member's stages (its run's own clock): the whole
    # step falls in the stage its point of stepping aside is in
    [(began, ended)] = window["stepped_spans"]
    assert 0.25 <= ended - began <= window["stepped_aside"]["s"] + 0.01
    from kernelmill.grade.side_by_side import stepped_by_stage

    run = results["candidate"]
    by_stage = stepped_by_stage(window["stepped_spans"], controls["candidate"].started_at,
                                run.stages, run.wall_s)
    assert abs(sum(by_stage.values()) - (ended - began)) < 0.01, (by_stage, run.stages)
    # the member's longest stretch of work before a point (what the other window waited for
    # at most): its first piece, 0.3 s, ending where the step began
    low, high = window["stretch_spans"]["candidate"]
    assert 0.25 <= high - low < 2.0 and high <= began + 0.01, (low, high, began)


# A member's checks with host work stepped aside (a Triton compile's, ``COMPILE_ASIDE``): its
# GPU work done, it reports ``aside``, works ``host`` CPU-s, then reaches its point
ASIDE = ("marks = [time.time()]; report({{'aside': 1}})\n"
         "    busy_until = time.process_time() + {host}\n"
         "    while time.process_time() < busy_until: pass\n"
         "    marks.append(time.time()); went = W.step_aside_point(receive, report)\n"
         "    marks.append(time.time())")


def test_a_window_waiting_goes_in_while_a_member_is_aside_in_host_work(tmp_path):
    # A member reports that its GPU work is done and host work (a compile) follows, 1.0 s of
    # it. Another window asks meanwhile: it goes in during that host work, not after it (as it
    # would for a stretch with no point); the member is stopped while it times and its time
    # limit moves on by the step; it is sent nothing until its point, where it goes on at once.
    path, got, controls = str(tmp_path / "gpu.lock"), {}, {}
    other = _other_window(path, got)
    window, results = _window({"reference": 1.0, "candidate": 1.0}, lock=path, cap_ms=200,
                              early={"candidate": ASIDE.format(host=1.0)},
                              after={"candidate": MARKS}, controls=controls)
    other.join(10)
    assert window["error"] is None and all(r.ok for r in results.values()), results
    asked, host_done, left = results["candidate"].value["marks"]
    assert results["candidate"].value["went"] is True
    assert got["to"] < host_done, (got, host_done)  # the other window, whole, in the host work
    assert window["stepped_aside"]["times"] == 1
    # stopped through the other window: its 1.0 CPU-s of host work took that much longer
    assert host_done - asked >= 1.0 + 0.25, (asked, host_done)
    assert controls["candidate"].waited_s >= 0.25, controls["candidate"].waited_s
    assert left - host_done < 0.5  # no window waited at its point: it went on at once
    # the member's asides, as the window's record keeps them (the verdict's profile)
    assert window["asides"]["candidate"]["times"] == 1
    assert window["asides"]["candidate"]["s"] >= 1.25, window["asides"]
    # the host work is no stretch of GPU work: none longer than the start's is recorded
    low, high = window["stretch_spans"].get("candidate", (0.0, 0.0))
    assert high <= asked + 0.05, (low, high, asked)


def test_a_member_kept_for_a_busy_mate_is_credited_and_waits_a_bounded_time(tmp_path):
    # The mate works 1.5 s with no point; the member reaches one at 0.2 s while another
    # window waits. It is kept at most PATIENCE_S, that wait credited to its time limit, then
    # goes on (the other window waits for the group, as without points); it is the last to be
    # ready, so nothing else credits it.
    from kernelmill.validate import step_aside

    path, got, controls = str(tmp_path / "gpu.lock"), {}, {}
    other = _other_window(path, got)
    window, results = _window({"reference": 1.0, "candidate": 1.0, "mate": 1.0}, lock=path,
                              cap_ms=200, droppable=("candidate", "mate"),
                              early={"candidate": POINT.format(first=0.2, then=2.0),
                                     "mate": "time.sleep(1.5)"},
                              after={"candidate": MARKS}, controls=controls)
    other.join(10)
    assert window["error"] is None and all(r.ok for r in results.values()), results
    reached, left = results["candidate"].value["marks"][1:3]
    kept = left - reached
    assert step_aside.PATIENCE_S * 0.8 <= kept <= step_aside.PATIENCE_S + 1.0, kept
    assert controls["candidate"].waited_s >= kept * 0.8, (controls["candidate"].waited_s, kept)
    assert window["stepped_aside"]["times"] == 0


def test_a_member_told_to_stop_at_a_point_is_not_timed_and_does_not_fail():
    from kernelmill.validate.window_worker import step_aside_point

    sent = []
    assert step_aside_point(lambda: "go\n", sent.append) is True
    assert step_aside_point(lambda: "stop\n", sent.append) is False
    assert sent == [{"between": 1}, {"between": 1}]
    with pytest.raises(ValueError):
        step_aside_point(lambda: "round 3\n", sent.append)


def test_a_member_that_left_during_the_rounds_keeps_the_gpu_shared_with_no_gap(tmp_path):
    # Dropped while timed (its answer came too late), a member is told to stop and goes on to
    # its checks after the window on its own: the hold turns shared with no gap (as when a
    # window fails), and none of that work runs inside the window waiting behind this one.
    path, got = str(tmp_path / "gpu.lock"), {}
    other = _other_window(path, got, hold_s=0.5, shared=False)
    late = ("import kernelmill.validate.window_worker as WW\n"
            "    calls = [0]\n"
            "    def slow(timer, receive, report, *a, **k):\n"
            "        def answer(value):\n"
            "            calls[0] += 1\n"
            "            if calls[0] == 3:\n"
            "                time.sleep(1.5)\n"
            "            report(value)\n"
            "        return serve(timer, receive, answer, *a, **k)\n"
            "    serve, W.serve_window = W.serve_window, slow")
    after = ("record['work'] = [time.time()]; busy_until = time.time() + 2.0\n"
             "    while time.time() < busy_until: pass\n"
             "    record['work'].append(time.time())")
    window, results = _window({"reference": 1.0, "candidate": 1.0, "late": 1.0}, lock=path,
                              cap_ms=1500, ci_target_pct=0.0, max_reps=10**6,
                              report_timeout_s=0.5, droppable=("candidate", "late"),
                              early={"late": late}, after={"late": after})
    other.join(20)
    assert "late" in window["dropped"], window["dropped"]
    began, ended = results["late"].value["work"]
    assert got["to"] <= began or got["from"] >= ended, (got, began, ended)


def test_a_window_right_after_another_on_its_gpu_skips_the_clock_warm_up(tmp_path):
    """The first participant warms the GPU's clocks for ``warm_ms``, unless a window on the
    same GPU (the same lock) ended within ``hot_s``: then it warms for ``rewarm_ms`` like the
    others. A window after a pause, or with ``hot_s`` 0, warms in full."""
    lock = str(tmp_path / "gpu0")
    ms = {"reference": 1.0, "candidate": 1.0}
    timing = {"cap_ms": 60, "warm_ms": 300, "rewarm_ms": 5, "min_reps": 3}
    first, _ = _window(ms, lock=lock, **timing)
    assert M.GpuLock(lock).since_window_s() < 5
    hot, _ = _window(ms, lock=lock, hot_s=60, **timing)
    cold, _ = _window(ms, lock=lock, hot_s=0, **timing)
    assert first["error"] is hot["error"] is cold["error"] is None
    assert "clocks_hot_s" not in first and "clocks_hot_s" not in cold
    assert 0 <= hot["clocks_hot_s"] < 60
    assert first["phases_ms"]["warm"] >= 300 and cold["phases_ms"]["warm"] >= 300
    assert hot["phases_ms"]["warm"] < 200
    assert M.GpuLock(None).since_window_s() is None
    # the time is what the parent wrote, not the file's modification time (which a confined
    # worker, unable to open it for writing, could still set)
    import os

    os.utime(lock + ".hot", (4102444800, 4102444800))
    assert 0 <= M.GpuLock(lock).since_window_s() < 60
    with open(lock + ".hot", "w") as held:
        held.write(repr(4102444800.0))  # a time in the future is no time
    assert M.GpuLock(lock).since_window_s() is None


def test_a_window_that_finds_the_gpu_clocks_up_skips_the_clock_warm_up(tmp_path):
    """NVML's reading as the window took the GPU alone (by ``activity``) shows the SM clock at
    ``clock_pct`` of its highest: the first participant warms for ``rewarm_ms`` only. A low
    clock (however busy NVML read the GPU over its last sample period), ``clock_pct`` 0, no
    reading or a reader that fails: the full warm-up. Every reading taken is kept; a window
    right after another (``hot_s``) takes none."""
    ms = {"reference": 1.0, "candidate": 1.0}
    timing = {"cap_ms": 60, "warm_ms": 300, "rewarm_ms": 5, "min_reps": 3, "hot_s": 0}

    def reading(busy: int, sm: int = 1980):
        return lambda: {"busy_pct": busy, "sm_mhz": sm, "max_sm_mhz": 1980}

    def fails():
        raise RuntimeError("NVML_ERROR_UNKNOWN")

    lock = str(tmp_path / "gpu0")
    up, _ = _window(ms, lock=lock, activity=reading(0), **timing)
    busy_low, _ = _window(ms, lock=lock, activity=reading(60, sm=1410), **timing)
    idle, _ = _window(ms, lock=lock, activity=reading(3, sm=345), **timing)
    off, _ = _window(ms, lock=lock, activity=reading(60), clock_pct=0, **timing)
    unread, _ = _window(ms, lock=lock, activity=lambda: None, **timing)
    failed, _ = _window(ms, lock=lock, activity=fails, **timing)
    windows = (up, busy_low, idle, off, unread, failed)
    assert all(w["error"] is None for w in windows)
    assert up["phases_ms"]["warm"] < 200 and up["clocks_up"] is True
    assert verdict_timing(up)["clocks_up"] is True
    for window in windows[1:]:
        assert window["phases_ms"]["warm"] >= 300 and "clocks_up" not in window
        assert "clocks_up" not in verdict_timing(window)
    assert idle["clocks"] == {"busy_pct": 3, "sm_mhz": 345, "max_sm_mhz": 1980}
    assert busy_low["clocks"]["sm_mhz"] == 1410 and off["clocks"]["busy_pct"] == 60
    assert "clocks" not in unread and "clocks" not in failed
    hot, _ = _window(ms, lock=lock, activity=fails, hot_s=60,
                     **{k: v for k, v in timing.items() if k != "hot_s"})
    assert hot["clocks_hot_s"] < 60 and "clocks" not in hot and hot["phases_ms"]["warm"] < 200
    # the GPU held alone: the window's parts and what came before and after them
    for window in windows:
        assert 0 <= window["exclusive_setup_ms"] <= window["exclusive_held_ms"]
        assert window["window_ms"] <= window["exclusive_held_ms"] < window["window_ms"] + 2000
    assert WindowSettings().clock_pct > 0  # on by default


def test_gpu_activity_reads_nvml_for_the_gpu_a_worker_sees(monkeypatch):
    """``gpus.gpu_activity``: NVML's busy share and SM clocks of the physical GPU behind a
    device as a worker with ``env`` sees it; None on CPU, without NVML, or where a reading
    fails."""
    import sys
    import types

    from kernelmill.validate import gpus

    monkeypatch.setattr(gpus, "_GPUS", {"0": ("GPU-aaa", "H200"), "1": ("GPU-bbb", "H200"),
                                        "": ("", "")})
    monkeypatch.setattr(gpus, "_NVML", {})
    asked = []
    fake = types.SimpleNamespace(
        NVML_CLOCK_SM=1, nvmlInit=lambda: None,
        nvmlDeviceGetHandleByUUID=lambda uuid: asked.append(uuid) or uuid,
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(
            gpu=70 if h == b"GPU-bbb" else 0),
        nvmlDeviceGetClockInfo=lambda h, kind: 1980,
        nvmlDeviceGetMaxClockInfo=lambda h, kind: 1980)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert gpus.gpu_activity("cpu") is None
    assert gpus.gpu_activity("cuda", {"CUDA_VISIBLE_DEVICES": "1"}) == {
        "busy_pct": 70, "sm_mhz": 1980, "max_sm_mhz": 1980}
    assert gpus.gpu_activity("cuda:1", {"CUDA_VISIBLE_DEVICES": "1,0"})["busy_pct"] == 0
    assert asked == [b"GPU-bbb", b"GPU-aaa"]  # one handle per GPU, kept
    gpus.gpu_activity("cuda", {"CUDA_VISIBLE_DEVICES": "1"})
    assert asked == [b"GPU-bbb", b"GPU-aaa"]

    def refused(handle):
        raise RuntimeError("NVML_ERROR_GPU_IS_LOST")

    monkeypatch.setattr(fake, "nvmlDeviceGetUtilizationRates", refused)
    assert gpus.gpu_activity("cuda", {"CUDA_VISIBLE_DEVICES": "1"}) is None
    monkeypatch.setattr(gpus, "_NVML", {})
    monkeypatch.setitem(sys.modules, "pynvml", None)  # not installed
    assert gpus.gpu_activity("cuda", {"CUDA_VISIBLE_DEVICES": "0"}) is None
    # a GPU NVML did not answer for is asked again only after NVML_RETRY_S
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert gpus.gpu_activity("cuda", {"CUDA_VISIBLE_DEVICES": "0"}) is None
    monkeypatch.setattr(gpus, "NVML_RETRY_S", 0.0)
    monkeypatch.setattr(fake, "nvmlDeviceGetUtilizationRates",
                        lambda h: types.SimpleNamespace(gpu=5))
    assert gpus.gpu_activity("cuda", {"CUDA_VISIBLE_DEVICES": "0"})["busy_pct"] == 5
    assert gpus.gpu_activity("cuda", {"CUDA_VISIBLE_DEVICES": "GPU-aaa"})["sm_mhz"] == 1980
    # the power and thermal policies' violation counters, summed, where the GPU keeps them
    counters = {0: 7_000, 1: 500}
    fake.NVML_PERF_POLICY_POWER, fake.NVML_PERF_POLICY_THERMAL = 0, 1
    fake.nvmlDeviceGetViolationStatus = lambda h, policy: types.SimpleNamespace(
        referenceTime=1, violationTime=counters[policy])
    assert gpus.gpu_activity("cuda", {"CUDA_VISIBLE_DEVICES": "0"})["held_ns"] == 7_500
    del counters[1]  # one counter the GPU does not keep: no reading of either
    assert "held_ns" not in gpus.gpu_activity("cuda", {"CUDA_VISIBLE_DEVICES": "0"})
    monkeypatch.setattr(gpus, "_GPUS", {"0": ("MIG-ccc", "H200"), "": ("", "")})
    assert gpus.gpu_activity("cuda", {"CUDA_VISIBLE_DEVICES": "0"}) is None  # a MIG instance


def test_inputs_get_copies_where_they_fit_in_half_the_l2_and_blocks_of_them_up_to_a_bound():
    """``placement_count``: copies that fit in half the L2 with room for one more, up to
    ``PLACEMENTS``; "blocks" placing also gives inputs that do not fit (an fp16 2048² GEMM's
    16 MB beside a 50 MB L2) ``PLACEMENTS`` copies, up to ``PLACED_MAX_BYTES``; "turns" none."""
    l2, mb = 50 << 20, 1 << 20
    assert T.placement_count(1 * mb, l2) == T.PLACEMENTS
    assert T.placement_count(8 * mb, l2) == 2  # 25 MB holds three: two and the outputs
    assert T.placement_count(16 * mb, l2, "blocks") == T.PLACEMENTS
    assert T.placement_count(16 * mb, l2, "turns") == 1
    assert T.placement_count(T.PLACED_MAX_BYTES, l2) == T.PLACEMENTS
    assert T.placement_count(T.PLACED_MAX_BYTES + 1, l2) == 1
    assert T.placement_count(0, l2) == 1 and T.placement_count(mb, 0) == 1
    values = [torch.ones(4), 3]
    assert T.placed_copies(values, "cpu") == [values]  # no copies off CUDA


def test_warming_the_cache_reads_every_byte_of_each_input_once_up_to_its_budget():
    """``warm_plan`` (the one-call check's inputs read into the L2 cache before its call): each
    tensor's every byte, its storage's whole (a transposed view too), read once by a
    conversion into a scratch tensor (an elementwise kernel's read, never a same-type copy), in
    chunks of at most ``WARM_CHUNK``, in order, until the budget runs out; ``warm_cache``
    replays those reads and leaves the inputs as they were. Off CUDA, without a budget,
    nothing is read."""
    from kernelmill.validate import placement

    chunk = placement.WARM_CHUNK
    big = torch.arange(5 * (chunk // 4 + 3), dtype=torch.float32).reshape(-1, 5).t()
    small = torch.arange(7, dtype=torch.int64)
    before = (big.clone(), small.clone())
    values = [big, 3, small]
    total = big.numel() * 4 + small.numel() * 8
    pairs, planned = T.warm_plan(values, "cpu", budget=1 << 30)
    assert planned == total
    assert all(into.dtype == torch.int16 and source.dtype == torch.uint8 and
               into.numel() == source.numel() <= chunk for into, source in pairs)

    def spans(tensor):  # the byte ranges of ``tensor``'s storage the reads cover
        base, end = tensor.untyped_storage().data_ptr(), tensor.untyped_storage().nbytes()
        return [(s.data_ptr() - base, s.data_ptr() - base + s.numel()) for _i, s in pairs
                if base <= s.data_ptr() < base + end]
    for tensor in (big, small):  # whole, each byte once, in order
        covered = spans(tensor)
        assert covered[0][0] == 0 and covered[-1][1] == tensor.untyped_storage().nbytes()
        assert all(a[1] == b[0] for a, b in itertools.pairwise(covered))
    assert len(pairs) == -(-big.numel() * 4 // chunk) + 1
    small[0] = -1  # the plan reads the tensors where they are, as a later load left them
    assert T.warm_cache(pairs) is True
    assert pairs[-1][0][:9].tolist() == [255] * 8 + [1]  # the last read: ``small``'s bytes
    small[0] = 0
    assert torch.equal(big, before[0]) and torch.equal(small, before[1])
    pairs, planned = T.warm_plan(values, "cpu", budget=chunk + 10)  # the budget: a cut
    assert planned == chunk + 10 and [s.numel() for _i, s in pairs] == [chunk, 10]
    assert not spans(small)
    assert T.warm_plan(values, "cpu") == ([], 0) and T.warm_plan([3], "cpu", 1 << 20) == ([], 0)
    assert T.warm_plan([torch.empty(0)], "cpu", 1 << 20) == ([], 0)
    assert T.warm_cache([(torch.zeros(2, dtype=torch.int16), torch.zeros(3, dtype=torch.uint8))]) \
        is False  # a read that fails: the call finds the cache as it is


def test_replaying_the_warm_reads_runs_nothing_a_submission_can_hook(monkeypatch):
    """Between the one-call check's load and its timed span, ``warm_cache`` makes no lookup a
    submission can reach (members it adds to ``torch.Tensor``, the device properties) and drops
    no tensor (a finaliser it adds): the plan's views are made before the window and kept."""
    pairs, _ = T.warm_plan([torch.arange(3000.0), torch.ones(5)], "cpu", budget=1 << 20)
    ran = []

    def hook(*args, **kwargs):
        ran.append(args)

    monkeypatch.setattr(torch.Tensor, "__del__", hook, raising=False)
    monkeypatch.setattr(torch.Tensor, "numel", lambda self: ran.append("numel") or 0)
    monkeypatch.setattr(torch.Tensor, "device", property(lambda self: ran.append("device")))
    monkeypatch.setattr(torch.cuda, "get_device_properties", hook)
    assert T.warm_cache(pairs) is True
    assert ran == []


def test_only_the_warm_one_call_checks_load_warms_the_cache(monkeypatch):
    """``_Run.load(single=True, warm=True)`` (the warm one-call check's, with ``single_warm``):
    the reads planned with the run (of the placement the one-call graph reads, the first) are
    replayed once that placement holds the new inputs, under either placing, and the bytes
    they read are kept for its report (none where a read failed); a scored call's load, the
    check on inputs just loaded, and any load of a run that planned no reads, read nothing
    more. ``_Run`` plans the reads of its first placement only where asked."""
    from kernelmill.grade.worker.call import _Run

    replayed = []
    ok = [True]

    def warm(pairs):
        replayed.append((pairs, [v.clone() for v in run.placements[0] if type(v) is torch.Tensor]))
        return ok[0]

    monkeypatch.setattr(T, "warm_cache", warm)
    for placing in T.PLACINGS:
        run = object.__new__(_Run)
        run.device, run.single_warm, run.warmed_bytes = "cpu", True, None
        run.placements = [[torch.zeros(4), 0] for _ in range(3)]
        run.warm_pairs, run.planned_bytes = ["the plan"], 64
        run.turns = T.PlacementTurns(3, placing)
        new = [torch.arange(4.0), 5]
        run.load(new)
        run.load(new, single=True)
        assert replayed == [] and run.warmed_bytes is None
        run.load(new, single=True, warm=True)
        assert len(replayed) == 1 and replayed[0][0] is run.warm_pairs
        assert torch.equal(replayed[0][1][0], new[0]) and run.warmed_bytes == 64
        replayed.clear()
        ok[0] = False
        run.load(new, single=True, warm=True)
        assert run.warmed_bytes == 0
        ok[0] = True
        replayed.clear()
        run.warm_pairs = []
        run.load(new, single=True, warm=True)
        assert replayed == []
    planned = []
    monkeypatch.setattr(T, "warm_plan", lambda values, device: planned.append(values) or ([], 0))
    for asked in (False, True):
        run = _Run(torch.nn.Identity(), "cpu", set(), set(), trials=[{"inputs": [torch.ones(3)]}],
                   single_warm=asked)
        assert planned == ([run.placements[0]] if asked else [])
        assert all(a is b for a, b in zip(planned[0], run.placements[0])) if asked else True


def test_a_timing_graph_reads_each_copy_of_its_inputs_in_one_block_of_calls():
    """``PlacementTurns``: while a graph of n calls is captured, call j reads copy
    ``j * copies // n`` ("blocks"), each copy's calls together; outside a capture, and with
    "turns", every call the next copy; one copy is always copy 0."""
    turns = T.PlacementTurns(4)
    read = []
    for index in range(20):
        turns.capture(index, 20)
        read.append(turns.next())
    turns.capture(None, 20)
    assert read == [0] * 5 + [1] * 5 + [2] * 5 + [3] * 5
    assert [turns.next() for _ in range(4)] == [1, 2, 3, 0]  # 21st call on: in turn
    two = T.PlacementTurns(4)
    assert [(two.capture(i, 2), two.next())[1] for i in range(2)] == [0, 2]
    interleaved = T.PlacementTurns(4, "turns")
    assert [(interleaved.capture(i, 8), interleaved.next())[1] for i in range(8)] == \
        [1, 2, 3, 0, 1, 2, 3, 0]
    alone = T.PlacementTurns(1)
    assert [(alone.capture(i, 8), alone.next())[1] for i in range(3)] == [0, 0, 0]


def _spare_timer(monkeypatch, spare: bool, calls: int = 256, output_numel: int = 1024,
                 max_calls: int = 1024):
    """A timer as ``_capture`` leaves it (a timing graph of ``calls`` calls), on fake graphs
    (the driver stubbed): the call counts of the graphs it captures, and of those replayed."""
    captured, replayed = [], []

    def captured_graph(self, stream, count):
        captured.append(count)
        return ("graph", count), [torch.empty(output_numel) for _ in range(count)]

    monkeypatch.setattr(T.Timer, "_captured", captured_graph)
    monkeypatch.setattr(TG, "_graph_replay", lambda graph: replayed.append(graph[1]))
    monkeypatch.setattr(TG, "_cuda_synchronize", lambda: None)
    monkeypatch.setattr(TG, "_current_stream", lambda: SimpleNamespace(wait_stream=lambda s: 0))
    timer = T.Timer(lambda: None, "cpu", spare=spare, max_calls_per_sample=max_calls)
    timer.graph, timer.outputs = captured_graph(timer, "stream", calls)
    captured.clear()
    timer.output, timer.calls_per_sample = timer.outputs[-1], calls
    timer.method, timer._stream = "cuda_graph", "stream"
    if spare:
        timer._capture_spare("stream")
    return timer, captured, replayed


def test_a_spare_graph_of_twice_the_calls_makes_that_resize_no_capture(monkeypatch):
    """``Timer(spare=True)``: ``prepare`` also captures the timing graph with twice its calls;
    a resize to that count (what an estimate taken alone in the window asks for when the one
    before read a call slow) takes it up, replayed once, with no capture in the window."""
    timer, captured, replayed = _spare_timer(monkeypatch, spare=True)
    assert captured == [512]  # the spare, in ``prepare``
    assert timer.resize(512) and captured == [512] and replayed == [512]
    assert timer.calls_per_sample == 512 and timer.graph == ("graph", 512)
    assert len(timer.outputs) == 512 and timer._spare is None
    assert timer.describe()["spare_graph"] == "taken up"
    # another count: captured as without a spare (and the spare's memory let go first)
    timer, captured, _ = _spare_timer(monkeypatch, spare=True)
    assert timer.resize(128) and captured == [512, 128] and timer._spare is None
    assert timer.describe()["spare_graph"] == "another count"
    # no spare asked for: the same resize captures in the window
    timer, captured, _ = _spare_timer(monkeypatch, spare=False)
    assert timer._spare is None and timer.resize(512) and captured == [512]
    assert "spare_graph" not in timer.describe()
    # none for a one-call graph (its estimate alone keeps it one), where twice the calls pass
    # ``max_calls``, or where both graphs' outputs together pass ``HELD_OUTPUT_BYTES``
    for kwargs in ({"calls": 1}, {"max_calls": 256},
                   {"output_numel": T.HELD_OUTPUT_BYTES // 4 // 700}):
        timer, captured, _ = _spare_timer(monkeypatch, spare=True, **kwargs)
        assert captured == [] and timer._spare is None, kwargs
        assert timer.describe()["spare_graph"] == "not captured"
    timer, captured, _ = _spare_timer(monkeypatch, spare=True, output_numel=T.HELD_OUTPUT_BYTES
                                      // 4 // 800)
    assert captured == [512]  # 768 outputs fit


def test_a_spare_graph_goes_when_the_estimate_alone_keeps_the_count(monkeypatch):
    timer, _captured, _ = _spare_timer(monkeypatch, spare=True)
    per_call = {"ms": timer.sample_ms / 256}
    monkeypatch.setattr(T.Timer, "_per_call_ms", lambda self, stream, alone=False: per_call["ms"])
    assert timer.planned_calls() is None and timer._spare is None
    timer, _captured, _ = _spare_timer(monkeypatch, spare=True)
    per_call["ms"] = timer.sample_ms / 400  # faster alone: twice the calls, the spare kept
    assert timer.planned_calls() == 512 and timer._spare is not None
    # the rounds (or a turn's settling) begin: no resize comes any more, the spare goes
    monkeypatch.setattr(timer, "queues", lambda: False)
    monkeypatch.setattr(timer, "sample", lambda: 1.0)
    assert timer.round(2) == [1.0, 1.0] and timer._spare is None
    assert timer.describe()["spare_graph"] == "unused"
    # a spare whose calls' outputs share memory is not kept
    monkeypatch.setattr(TG, "outputs_overlap", lambda outputs: True)
    timer, captured, _ = _spare_timer(monkeypatch, spare=True)
    assert captured == [512] and timer._spare is None
    assert timer.describe()["spare_graph"] == "outputs overlap"


def test_the_stream_gate_is_on_unless_the_timing_setting_is_false():
    """The grader's timers gate the unseen check's replays unless the policy's timing setting
    ``gate`` is ``false`` (only a false turns it off: a bare word is a string, not a no); a
    timer made elsewhere makes one only when asked; the cached reference timings are keyed
    without it (it times only the unseen check's replays), and a timer on the host makes none."""
    from kernelmill.grade.reference_run import cached_timing_settings
    from kernelmill.grade.worker.timing import _timer_options

    for settings in ({}, {"gate": True}, {"gate": "false"}, {"gate": 0}):
        assert _timer_options({"timing_settings": settings})["gate"] is True, settings
    assert "gate" not in _timer_options({"timing_settings": {"gate": False}})
    assert _timer_options({})["gate"] is True  # a payload without timing settings
    assert not T.Timer(lambda: None, "cuda").gate_wanted
    assert cached_timing_settings({"gate": True, "sample_ms": 0.5}) == {"sample_ms": 0.5}
    timer = T.Timer(lambda: None, "cpu", gate=True)
    assert timer.prepare()["gate"] is False
    assert timer.once(lambda: 3)[1] == 3


def test_only_a_timer_with_an_unseen_check_asks_for_the_stream_gate(monkeypatch):
    """The gate times the unseen check's replays alone: the reference's timing worker (no
    unseen check) makes none, the candidate's asks for it."""
    from kernelmill.grade.worker import timing

    asked = []

    class Stop(Exception):
        pass

    def made(fn, device, **options):
        asked.append(options.get("gate", False))
        raise Stop

    monkeypatch.setattr(timing.T, "Timer", made)
    for unseen in (None, lambda *args: 0):
        with pytest.raises(Stop):
            timing._serve_timing(lambda: None, "cpu", {"timing_settings": {}}, unseen=unseen)
    assert asked == [False, True]


def test_a_policy_refuses_a_timing_setting_that_nothing_reads():
    """A policy's timing settings are the window's (``WindowSettings``) and the timer's
    (``TIMER_SETTINGS``, each of which changes what the worker's timer is asked for); a name
    neither reads (a typo, a removed setting) is refused with a one-line error naming it, not
    ignored."""
    from kernelmill.grade.policy import TIMER_SETTINGS, Policy
    from kernelmill.grade.worker.timing import _timer_options, single_warm, timing_placing

    def read(payload):
        return _timer_options(payload), timing_placing(payload), single_warm(payload)

    plain = read({})
    changed = {"warmup": 7, "graph": False, "sample_ms": 0.25, "cover": "sleep",
               "spare_graph": False, "replay_sync": False, "gate": False, "placing": "turns",
               "single_warm": False}
    assert set(changed) == TIMER_SETTINGS
    for name, value in changed.items():
        payload = {"timing_settings": {name: value}}
        assert read(payload) != plain, name
    assert read({"timing_settings": {"single_warm": "no"}}) == plain  # only a false turns it off
    Policy(timing_settings={"cap_ms": 30.0, "settle_if": "held", **changed})
    # a switch set to anything but a boolean would be read as it was: refused
    for name in ("single_warm", "gate", "spare_graph", "replay_sync"):
        for wrong in ("False", 0, None):
            with pytest.raises(ValueError, match=f"timing setting '{name}' is a switch"):
                Policy(timing_settings={name: wrong})
    for wrong in ({"target_ms": 1.0}, {"gat": False, "min_reps": 2}, {"late_locked": True}):
        with pytest.raises(ValueError, match="unknown timing setting") as raised:
            Policy(timing_settings=wrong)
        assert "\n" not in str(raised.value) and repr(next(iter(wrong))) in str(raised.value)


def test_the_spare_graph_is_on_unless_the_timing_setting_is_false(monkeypatch):
    """The policy's timing setting ``spare_graph`` is on unless set to ``false`` (a policy
    refuses any other value than a boolean); the cached reference timings are keyed without
    it, and a timer that ``measure`` makes itself (never sized again in a window) gets none."""
    from kernelmill.grade.reference_run import cached_timing_settings
    from kernelmill.grade.worker.timing import _timer_options

    for settings in ({"spare_graph": True}, {}, {"sample_ms": 0.5}):
        assert _timer_options({"timing_settings": settings})["spare"] is True
    assert _timer_options({})["spare"] is True
    assert "spare" not in _timer_options({"timing_settings": {"spare_graph": False}})
    assert cached_timing_settings({"spare_graph": True, "sample_ms": 0.5}) == {"sample_ms": 0.5}
    assert not T.Timer(lambda: None, "cpu", spare="yes").spare_wanted
    made = []

    class Recorded(T.Timer):
        def __init__(self, *args, **kwargs):
            made.append(kwargs.get("spare"))
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(T, "Timer", Recorded)
    T.measure(lambda: None, "cpu", cap_ms=5, min_reps=2, max_reps=4, spare=True)
    assert made == [False]


def test_the_timer_tells_its_place_hook_each_captured_call_and_the_capture_end(monkeypatch):
    """``Timer(place=...)``: called with (j, n) before each of a capture's n calls, and with
    (None, n) once it ended, also where a call raised (the capture's driver calls stubbed)."""
    told = []
    timer = T.Timer(lambda: told.append("call") or 1, "cpu",
                    place=lambda index, calls: told.append((index, calls)))
    monkeypatch.setattr(TG, "_CUDAGraph", lambda: object())
    monkeypatch.setattr(TG, "_capture_begin", lambda graph: None)
    monkeypatch.setattr(TG, "_capture_end", lambda graph: None)
    monkeypatch.setattr(TG, "_stream_ctx", lambda stream: T._nullcontext())
    _graph, outputs = timer._captured(None, 3)
    assert outputs == [1, 1, 1]
    assert told == [(0, 3), "call", (1, 3), "call", (2, 3), "call", (None, 3)]
    told.clear()
    timer.fn = lambda: 1 / 0
    with pytest.raises(ZeroDivisionError):
        timer._captured(None, 2)
    assert told == [(0, 2), (None, 2)]


def test_the_policy_picks_the_placing_and_an_unknown_one_is_the_default():
    from kernelmill.grade.worker.timing import timing_placing

    assert timing_placing({"timing_settings": {"placing": "turns"}}) == "turns"
    assert timing_placing({"timing_settings": {"placing": "anything"}}) == T.PLACING
    assert timing_placing({}) == T.PLACING == "blocks"


@pytest.mark.gpu
def test_a_spare_graph_is_captured_beside_the_timing_graph_and_taken_up_on_cuda():
    """On CUDA: ``Timer(spare=True)``'s ``prepare`` captures a second graph of twice the calls,
    and a resize to that count takes it up with no capture (one without a spare captures),
    its output the forward's and its samples timed."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    x = torch.randn(1 << 14, device="cuda")

    def resized(spare: bool) -> list[int]:
        """The graphs captured (their call counts) while the timer resizes to twice its
        calls, after ``prepare``."""
        timer = T.Timer(lambda: x * 2 + 1, "cuda", spare=spare, sample_ms=0.05)
        timer.prepare()
        assert timer.method == "cuda_graph", timer.capture_error
        calls = timer.calls_per_sample
        assert calls >= 2, timer.describe()
        assert (timer._spare is not None and len(timer._spare[1]) == 2 * calls) == spare
        captured = []
        capture = timer._captured
        timer._captured = lambda stream, count: captured.append(count) or capture(stream, count)
        assert timer.resize(2 * calls)
        assert timer.calls_per_sample == 2 * calls and timer._spare is None
        assert torch.equal(timer.output, x * 2 + 1)
        samples = [timer.sample() for _ in range(5)]
        assert all(s > 0 for s in samples), samples
        return [c // calls for c in captured]

    assert resized(True) == []  # taken up: no capture in the window
    assert resized(False) == [2]


@pytest.mark.gpu
def test_a_captured_timing_graph_reads_16_mb_inputs_at_four_places_in_blocks():
    """On CUDA: an fp16 2048² GEMM's inputs (16 MB, more than half the L2 holds twice) get
    ``PLACEMENTS`` copies at different addresses, and the timing graph's calls read them in
    blocks; every copy holds the same values."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    a = torch.randn(2048, 2048, device="cuda", dtype=torch.float16)
    b = torch.randn(2048, 2048, device="cuda", dtype=torch.float16)
    sets = T.placed_copies([a, b], "cuda")
    assert len(sets) == T.PLACEMENTS
    assert len({s[0].data_ptr() for s in sets}) == T.PLACEMENTS
    assert all(torch.equal(s[0], a) and torch.equal(s[1], b) for s in sets)
    turns = T.PlacementTurns(len(sets))
    read = []

    def fn():
        copy = turns.next()
        read.append((torch.cuda.is_current_stream_capturing(), copy))
        x, y = sets[copy]
        return x @ y

    timer = T.Timer(fn, "cuda", place=turns.capture)
    info = timer.prepare()
    assert info["method"] == "cuda_graph", info
    n = timer.calls_per_sample
    captured = [copy for capturing, copy in read if capturing][-n:]
    assert captured == sorted(captured) and captured[0] == 0, (n, captured)
    if n >= T.PLACEMENTS:
        assert set(captured) == set(range(T.PLACEMENTS)), captured


@pytest.mark.gpu
def test_a_replay_timed_without_the_synchronize_ends_with_its_work_and_reads_no_longer():
    """``replay_sync=False``: ``once`` of a graph replay records its end event on the replay's
    stream alone; the replay's work is done when it returns (its output is right), and the
    reading is the device's span, never longer than with the synchronize inside it."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    a = torch.randn(2048, 2048, device="cuda")
    readings = {}
    for sync in (True, False):
        timer = T.Timer(lambda: torch.relu(a) * 2, "cuda", replay_sync=sync)
        info = timer.prepare()
        assert info["method"] == "cuda_graph", info
        times = []
        for _ in range(20):
            ms, out = timer.once(lambda: torch.relu(a) * 2, whole=True)
            times.append(ms / timer.calls_per_sample)
            assert torch.equal(out, torch.relu(a) * 2)
        readings[sync] = min(times)
    assert readings[False] <= readings[True] * 1.05, readings


@pytest.mark.gpu
def test_a_gated_replay_is_timed_from_its_queued_start_and_under_a_profiler_never_hangs():
    """``gate=True``: ``once`` of a graph replay queues it and its events behind a stream gate,
    then opens it: the replay's work is done when it returns (its output is right), and the
    reading is no longer than the ungated one's (the host's launch is out of it). A graph of
    many calls of several kernels each, replayed gated inside a span while a profiler records
    its kernels, as the grader's witness does, returns too (the host never blocks on the
    launch while the device waits), its reading no longer than the ungated one's."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    a = torch.randn(1024, 1024, device="cuda")
    readings = {}
    for gate in (False, True):
        timer = T.Timer(lambda: torch.relu(a) * 2 + 1, "cuda", gate=gate)
        info = timer.prepare()
        assert info["method"] == "cuda_graph", info
        assert info.get("gate", False) is gate and timer.gated is gate, info
        times = []
        for _ in range(30):
            ms, out = timer.once(lambda: torch.relu(a) * 2 + 1, whole=True)
            times.append(ms / timer.calls_per_sample)
            assert torch.equal(out, torch.relu(a) * 2 + 1)
        readings[gate] = min(times)
    assert readings[True] <= readings[False] * 1.05, readings
    small = torch.randn(64, device="cuda")

    def many():  # five kernels a call
        return (((small.sin() + 1).cos() * 3).exp() - 2).abs()

    spans = {}
    for gate in (True, False):
        timer = T.Timer(many, "cuda", gate=gate, sample_ms=20.0)
        timer.prepare()
        assert timer.calls_per_sample >= 512 and timer.gated is gate, timer.describe()
        activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        with torch.profiler.profile(activities=activities):
            spans[gate] = min(timer.once(many, lambda: torch.profiler.record_function("span"),
                                         whole=True)[0] for _ in range(5))
        assert torch.allclose(timer.output, many())
    assert 0 < spans[True] <= spans[False] * 1.05, spans


def test_a_warm_up_of_one_call_samples_a_sample_long_or_more_is_the_windows_estimate(
        monkeypatch):
    """``Timer.planned_calls`` in a window's warm-up turn: where the timing graph holds one call
    and the warm-up's samples, just taken alone, read a sample and a launch's margin or more,
    those samples are the estimate (one call per sample whatever a new one says): no one-call
    graph is captured and replayed again in the window. Shorter, or a graph of several calls,
    is estimated anew as before, and may ask for another count."""
    timer = T.Timer(lambda: None, "cpu")
    timer.method, timer._stream, timer.sample_ms = "cuda_graph", object(), 1.0
    estimated = []

    def per_call(stream, alone=False):
        estimated.append(alone)
        return 0.3

    monkeypatch.setattr(timer, "_per_call_ms", per_call)
    monkeypatch.setattr(timer, "_calls_for", lambda ms: 1 if ms >= 1.0 else 4)
    timer.calls_per_sample, timer.warm_readings = 1, [5.4, 5.2, 5.3]
    assert timer.planned_calls() is None and timer.estimate_ms == 5.2 and estimated == []
    assert timer.warm_readings == []  # read once: a later call estimates anew
    # a reading under a sample and its margin: estimated again, alone, and sized by that
    timer.warm_readings = [1.05, 1.2]
    assert timer.planned_calls() == 4 and estimated == [True] and timer.estimate_ms == 0.3
    # a graph of several calls: estimated again whatever its samples read
    timer.calls_per_sample, timer.warm_readings = 2, [5.0, 5.0]
    assert timer.planned_calls() == 4 and estimated == [True, True]
    # no warm-up before it: estimated again
    timer.calls_per_sample = 1
    assert timer.planned_calls() == 4 and estimated == [True, True, True]
    # ``warm`` keeps its samples' readings for it
    real = T.Timer(lambda: torch.ones(64).sum(), "cpu")
    real.prepare()
    done = real.warm(1.0)
    assert done >= 2 and len(real.warm_readings) == done and min(real.warm_readings) > 0


@pytest.mark.gpu
def test_a_long_calls_warm_up_turn_captures_nothing_again():
    """On a GPU: a matmul of several ms, one call per sample; its window warm-up turn (``warm``
    then ``planned_calls``) captures no graph, and the estimate it keeps is its samples'."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    a = torch.randn(8192, 8192, device="cuda")
    timer = T.Timer(lambda: a @ a, "cuda")
    timer.prepare()
    assert timer.calls_per_sample == 1
    captures = []
    real = timer._captured
    timer._captured = lambda stream, calls: (captures.append(calls), real(stream, calls))[1]
    timer.warm(20.0)
    assert timer.planned_calls() is None and captures == []
    ms, _ = timer.once(lambda: a @ a)
    assert 0.8 <= timer.estimate_ms / ms <= 1.25, (timer.estimate_ms, ms)


def test_a_member_waiting_for_a_parent_held_at_the_gate_gets_the_steps_time_back():
    # A member that answered (it waits for the parent's next command) while a mate's point
    # lets another grade's window in: the parent's send to it waits at the gate for the whole
    # step, crediting no one, and the member is stopped meanwhile. The step is given back to
    # it once, whoever else credits the same seconds (the union of the spans). On an H100 a
    # member of a hostile group of 8 timed out so, after a 45 s step credited 2 s.
    from types import SimpleNamespace

    from kernelmill.validate.step_aside import StepAside

    class Held:
        def window_waiting(self):
            return True

        def let_window_in(self):
            time.sleep(0.4)
            return True

    controls = {"kept": Control(), "ready": Control()}
    read_fd, write_fd = os.pipe()
    controls["ready"]._attach(write_fd)
    group = SimpleNamespace(controls=controls, dropped={})
    stepper = StepAside(group)
    stepper.attach()
    try:
        stepper.hold(Held())
        controls["ready"]._deliver({"ready": 1})  # answered: waits for the parent
        controls["ready"].next_report(1.0)
        stepping = threading.Thread(target=controls["kept"]._deliver, args=({"between": 1},))
        stepping.start()
        time.sleep(0.1)  # the step is under way: the parent's send waits at the gate
        began = time.monotonic()
        assert controls["ready"].send("time")
        held_s = time.monotonic() - began
        stepping.join(5)
        assert held_s >= 0.2, held_s
        waited = controls["ready"].waited_s
        assert held_s - 0.05 <= waited <= 0.5, (waited, held_s)
        # the parent's own crediting of the same wait adds nothing twice
        controls["ready"].extend(held_s)
        assert abs(controls["ready"].waited_s - waited) < 0.05, controls["ready"].waited_s
        assert os.read(read_fd, 100) == b"time\n"
    finally:
        stepper.close()
        os.close(read_fd)
        controls["ready"]._end()


def test_a_workers_credited_waits_count_each_second_once_and_grants_apart():
    control = Control()
    control.extend(2.0, ended=10.0)  # 8..10
    control.extend(1.0, ended=9.5)  # inside it: nothing new
    assert control.waited_s == 2.0
    control.extend(2.0, ended=11.0)  # 9..11: one second more
    assert control.waited_s == 3.0
    control.extend(1.0, ended=20.0)  # apart: 19..20
    control.extend(15.0, ended=21.0)  # 6..21 covers both and the gap between
    assert control.waited_s == 15.0
    control.grant(5.0)  # a phase's own time, granted outright
    assert control.waited_s == 20.0
    control.extend(-3.0)
    assert control.waited_s == 20.0


def test_a_stopped_worker_is_credited_its_stop_as_it_lasts_and_once():
    # Whoever stops a worker's process group (a step aside, a mate's turn, the rest after its
    # own), the time it stands stopped moves its limit on, counted while the stop lasts (a
    # long one does not kill it first) and once, however many of the parent's threads
    # credit the same seconds.
    import subprocess

    proc = subprocess.Popen(["sleep", "30"], start_new_session=True)
    control = Control()
    control.pid = proc.pid
    try:
        control.pause()
        time.sleep(0.3)
        assert 0.25 <= control.waited_s < 1.0, control.waited_s  # under way: counted so far
        control.extend(0.2)  # the parent crediting the same wait: nothing twice
        control.resume()
        once = control.waited_s
        assert 0.25 <= once < 1.0, once
        time.sleep(0.2)
        assert control.waited_s == once  # running again: nothing more
        control.pause()
        time.sleep(0.1)
    finally:
        control._end()  # resumed (credited) before its end
        proc.kill()
        proc.wait()
    assert once + 0.08 <= control.waited_s < once + 0.6, (once, control.waited_s)


def test_a_step_for_members_aside_alone_moves_the_windows_deadlines_and_ends_with_them():
    # Members in host work (``aside``) are stopped for another window's step like kept ones:
    # the step is added to their time limits and to the window's deadlines (no kept member's
    # wait credits it here), and so is a member waiting for the parent, stopped with them; one
    # that ended in its host work is aside no longer, and no window is let in for it.
    from types import SimpleNamespace

    from kernelmill.validate.step_aside import StepAside

    class Held:
        steps = 0

        def window_waiting(self):
            return True

        def let_window_in(self):
            Held.steps += 1
            time.sleep(0.1)
            return True

    controls = {"a": Control(), "b": Control()}
    group = SimpleNamespace(controls=controls, dropped={})
    stepper = StepAside(group)
    stepper.attach()
    try:
        stepper.hold(Held())
        controls["b"].idle = True  # waiting for the parent: not at work
        controls["a"]._deliver({"aside": 1})  # intercepted: a step, with "a" aside alone
        assert Held.steps == 1 and not controls["a"].reports
        assert stepper.delay_s >= 0.09 and controls["a"].waited_s >= 0.09
        # "b", waiting for the parent, was stopped for the step too: not its time either
        assert 0.09 <= controls["b"].waited_s < 0.5
        controls["a"]._end()  # it ended in its compile
        time.sleep(0.3)  # the poller looks again: nobody aside, nobody kept
        assert Held.steps == 1
    finally:
        stepper.close()
