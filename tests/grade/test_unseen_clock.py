"""The unseen-input check's calls on a captured graph are judged by the device's clock: the
timer's host latency (its synchronize's wake-up, the end event's record) is no part of a graph
replay's work, and on a busy host it read an honest GEMM's check replays 3.5x slower than its
scored ones. The kernels' busy time stands for them: the gaps a busy host leaves between a
replay's kernels while the witness is on are no part of its work either."""
from kernelmill.grade.checks.probes import unseen_checks
from kernelmill.grade.policy import Policy

SCORED_MS = 0.048  # the scored replays' time per call


def _facts(check_ms: float, check_busy_ms: float | None) -> dict:
    facts = {"method": "cuda_graph", "calls": 8, "checks": [],
             "order": ["seen"] * 3 + ["even", "unseen", "after"],
             "seen_ms": [check_ms] * 3, "unseen_ms": [check_ms], "after_ms": [check_ms],
             "seen_device_us": [48.0] * 3, "unseen_device_us": [48.5], "after_device_us": [48.0],
             "even_calls_us": [48.0] * 8, "even_overlap_us": 0.0}
    if check_busy_ms is not None:  # the kernels' busy time per call
        for kind, n in (("seen", 3), ("unseen", 1), ("after", 1)):
            facts[f"{kind}_busy_ms"] = [check_busy_ms] * n
    return facts


def _judge(facts: dict) -> tuple[list[str], dict]:
    found, checks = [], {}
    unseen_checks(facts, [], Policy(), None, lambda code, why: found.append(f"{code}: {why}"),
                  True, "cuda:0", checks, scored_ms=SCORED_MS)
    return found, checks


def test_host_latency_around_graph_replays_is_not_the_forwards_time():
    found, checks = _judge(_facts(check_ms=0.166, check_busy_ms=0.049))
    assert found == [], found
    assert checks["unseen_vs_scored_ms"]["passed"] is True
    assert checks["unseen_time_ms"]["passed"] is True
    assert "[0.049" in checks["unseen_time_ms"]["detail"]  # read by the device's clock


def test_work_the_check_replays_do_and_the_scored_ones_skip_still_shows():
    facts = _facts(check_ms=0.166, check_busy_ms=0.160)
    for kind in ("seen", "unseen", "after"):  # every check call's kernels do that work
        facts[f"{kind}_device_us"] = [160.0] * len(facts[f"{kind}_device_us"])
    facts["even_calls_us"] = [160.0] * 8
    found, checks = _judge(facts)
    assert any("tells the check apart" in f for f in found), found
    assert checks["unseen_vs_scored_ms"]["passed"] is False


def test_without_device_times_per_call_the_replays_wall_time_decides():
    facts = _facts(check_ms=0.166, check_busy_ms=None)
    for kind in ("seen", "unseen", "after"):
        del facts[f"{kind}_device_us"]
    found, _ = _judge(facts)
    assert any("tells the check apart" in f for f in found), found


def test_an_honest_replays_first_call_is_its_time_when_the_rest_run_slow():
    """An honest MinGPT GELU graded at KernelBench's size on an H200: its check replays' first
    calls ran 130 µs of kernels, as the scored replays did (0.1318 ms per call), while its whole
    check replays kept the GPU busy 0.188-0.220 ms per call."""
    facts = {"method": "cuda_graph", "calls": 4, "checks": [],
             "order": ["seen"] * 3 + ["even"] + ["unseen"] * 2 + ["after"] * 2,
             "even_calls_us": [130.2, 130.6, 130.1, 130.4], "even_overlap_us": 0.0,
             "seen_ms": [0.19, 0.195, 0.188], "unseen_ms": [0.22, 0.218],
             "after_ms": [0.192, 0.202],
             "seen_busy_ms": [0.1922, 0.1952, 0.188], "unseen_busy_ms": [0.2201, 0.2184],
             "after_busy_ms": [0.1919, 0.202],
             "seen_device_us": [130.175, 130.815, 130.687], "unseen_device_us": [130.463, 130.079],
             "after_device_us": [132.447, 129.984]}
    found, checks = [], {}
    unseen_checks(facts, [], Policy(), None, lambda code, why: found.append(f"{code}: {why}"),
                  True, "cuda:0", checks, scored_ms=0.1318)
    assert found == [], found
    assert checks["new_inputs_vs_scored_ms"]["passed"] is True
    # the same check replays against scored calls that did a third of the work
    found = []
    unseen_checks(facts, [], Policy(), None, lambda code, why: found.append(f"{code}: {why}"),
                  True, "cuda:0", {}, scored_ms=0.044)
    assert any("tells the check apart" in f for f in found), found


def test_gaps_between_an_honest_replays_kernels_are_not_its_time():
    """An honest ReLU graded on an H200 beside other grades: its kernels ran 35 µs per call in
    every check replay and the scored replays read 0.035 ms, while the first kernel's start to
    the last one's end read 0.087 and 0.598 ms on the unseen inputs."""
    facts = _facts(check_ms=0.7, check_busy_ms=0.036)
    facts["unseen_ms"] = [0.0871, 0.5981]
    facts["unseen_busy_ms"] = [0.0360, 0.0347]
    facts["unseen_device_us"] = [36.0, 34.7]
    facts["order"] = ["seen"] * 3 + ["even", "unseen", "after", "unseen", "after"]
    facts["after_ms"] = facts["after_busy_ms"] = [0.0347, 0.0347]
    facts["after_device_us"] = [34.7, 34.7]
    found, checks = _judge(facts)
    assert found == [], found
    assert checks["unseen_time_ms"]["passed"] is True


def test_an_empty_first_call_in_the_check_replays_does_not_hide_their_work():
    """A forward whose check replays leave their first call empty (the check reads the last
    call's output) and compute in the others: each replay's mean call, over
    ``CHECK_REPLAY_SPREAD``, still stands against scored calls that do a sixth of the work."""
    facts = _facts(check_ms=0.31, check_busy_ms=0.30)
    for kind in ("seen", "unseen", "after"):
        facts[f"{kind}_device_us"] = [2.0] * len(facts[f"{kind}_device_us"])
    found, checks = [], {}
    unseen_checks(facts, [], Policy(), None, lambda code, why: found.append(f"{code}: {why}"),
                  True, "cuda:0", checks, scored_ms=0.05)
    assert any("tells the check apart" in f for f in found), found


class _Witness:
    """The witness's readings of one unseen check on a graph of 4 calls: three replays on the
    timed inputs, the hot one, one on unseen inputs, one after (``span_calls_us`` sets the
    rest, as the real one does)."""

    def __init__(self, busy_us: float):
        self.busy_us = busy_us

    def span_calls_us(self, calls):
        counts = calls if isinstance(calls, list) else [calls] * 6
        self.span_counts = list(counts)
        self.span_busy_us = [self.busy_us * n for n in counts]
        self.span_overlap_us = [0.0] * 6
        self.span_run_names = [[["k"]] * n for n in counts]
        return [[48.0] * n for n in counts]


def test_every_fact_the_worker_reports_of_the_check_reaches_the_judge():
    """The worker's facts cross into the parent as typed groups (``grade.facts``), which keep
    only the fields they declare: a reading the worker makes and the group lacks is lost on
    the way, and the judge falls back to a weaker one. The kernels' busy time was: groups of 8
    honest Triton GEMMs on an H200 were flagged by their check replays' host latency (0.168 ms
    per call against 0.047 scored, 49 µs of kernels each)."""
    from kernelmill.grade.facts import UnseenFacts
    from kernelmill.grade.worker.probes import _Probes

    run = type("Run", (_Probes,), {})()
    run.witness, run.captured = _Witness(busy_us=48.5), []
    unseen = {"seen_ms": [0.1744, 0.1683, 0.1708], "unseen_ms": [0.0556], "after_ms": [0.055],
              "checks": [], "method": "cuda_graph", "calls": 4,
              "order": ["seen", "seen", "seen", "even", "unseen", "after"]}
    _Probes._unseen_device_us(run, unseen, [])
    assert unseen.get("seen_busy_ms") and unseen.get("even_calls_us"), unseen
    typed = UnseenFacts.from_dict(unseen)
    assert set(typed) == set(unseen), set(unseen) - set(typed)
    found, checks = [], {}
    unseen_checks(typed, [], Policy(), None, lambda code, why: found.append(f"{code}: {why}"),
                  True, "cuda:0", checks, scored_ms=0.04718)
    assert found == [], found
    assert "0.0485" in checks["unseen_time_ms"]["detail"]  # the kernels' busy time, not 0.17


def _power_capped(check_device_us: dict) -> dict:
    """An honest Triton GEMM (KernelBench level2_12, 1024x8192x8192 fp32) graded on an H200:
    its kernels ran 6,275 µs per call before and during the first unseen input, then 7,585-
    7,790 µs on every call after it (an input drawn at a larger scale took the GPU to its power
    cap; the scored calls read 6,286 µs)."""
    facts = {"method": "cuda_graph", "calls": 1, "checks": [],
             "order": ["seen"] * 3 + ["unseen", "after", "unseen", "after"]}
    for kind, us in check_device_us.items():
        facts[f"{kind}_device_us"] = us
        facts[f"{kind}_busy_ms"] = [v / 1e3 for v in us]
        facts[f"{kind}_ms"] = [v / 1e3 * 1.02 for v in us]
    return facts


def test_a_gpu_that_slows_across_the_check_is_not_the_forward_changing_its_ways():
    from kernelmill.grade.checks.device_work import DRIFT_CAP, gpu_drift

    facts = _power_capped({"seen": [6275.7, 6275.3, 6284.3], "unseen": [6288.2, 7790.4],
                           "after": [7585.1, 7585.8]})

    def judged(window):
        found, checks = [], {}
        unseen_checks(facts, [], Policy(), None, lambda c, why: found.append(f"{c}: {why}"),
                      True, "cuda:0", checks, scored_ms=6.286, drift=gpu_drift(window))
        return found, checks

    found, _ = judged(None)  # no witness: the bound stands as it was
    assert any("changed its ways" in f for f in found), found
    # the reference's own round read 21% slower after the checks than before them
    window = {"unseen_clock_ms": {"before": [2.717, 2.716, 2.718], "after": [3.29, 3.3, 3.31]}}
    found, checks = judged(window)
    assert found == [], found
    assert "the GPU slowed 1.2" in checks["unseen_time_device_us"]["detail"]
    # a reference that ran faster after, or readings that are not times, widen nothing
    assert gpu_drift({"unseen_clock_ms": {"before": [3.0], "after": [2.0]}}) == 1.0
    assert gpu_drift({"unseen_clock_ms": {"before": [3.0], "after": ["x"]}}) == 1.0
    assert gpu_drift({"unseen_clock_ms": {"before": [1.0], "after": [9.0]}}) == DRIFT_CAP


def test_an_answer_cache_is_still_seen_when_the_gpu_slows_across_the_check():
    """A cache that answers the timed inputs in half the time: no slowing the reference can
    report (at most ``DRIFT_CAP``) covers the unseen inputs' honest time."""
    from kernelmill.grade.checks.device_work import gpu_drift

    facts = _power_capped({"seen": [3100.0, 3101.0, 3099.0], "unseen": [6280.0, 6290.0],
                           "after": [3100.0, 3102.0]})
    found, checks = [], {}
    window = {"unseen_clock_ms": {"before": [1.0], "after": [5.0]}}
    unseen_checks(facts, [], Policy(), None, lambda c, why: found.append(f"{c}: {why}"),
                  True, "cuda:0", checks, scored_ms=3.1, drift=gpu_drift(window))
    assert any("remembers inputs it has seen" in f for f in found), found


def test_a_spare_unseen_trial_is_made_only_where_the_results_file_has_room(monkeypatch):
    """``reference_tasks._room_for_spare``: a reference whose trials fill the results file
    (KernelBench's level2_71 convolution: 4.1 GiB with a spare, over the 4 GiB a run's file
    may be) is graded without its spare rather than failing; with room, or no limit, the
    spare is made."""
    import resource

    from kernelmill.grade.worker.reference_tasks import _room_for_spare

    gib = 1 << 30
    monkeypatch.setattr(resource, "getrlimit", lambda _which: (4 * gib, 4 * gib))
    ends = [0] + [int(k * 0.6 * gib) for k in range(1, 7)]  # six trials of 0.6 GiB: 3.6 GiB
    assert not _room_for_spare(ends)
    assert _room_for_spare(ends[:4])  # 1.8 GiB written: 3.0 with twice a trial past it
    assert _room_for_spare([0])  # nothing written yet
    monkeypatch.setattr(resource, "getrlimit",
                        lambda _which: (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    assert _room_for_spare(ends)


def test_a_reference_run_lets_a_waiting_window_in_before_each_trial_and_before_its_forward():
    """``reference_tasks._trials_under``: a reference run holds the GPU shared through its
    trials; a timing window that asks meanwhile goes first at a point before each trial and
    again between the trial's inputs, drawn and written into the run's files, and its forward
    (so it waits for half a trial, not a whole one). The time stepped aside is the stage's
    ``stepped_aside`` part, and the longest stretch between points is said."""
    import torch
    from kernelmill.grade.worker.reference_tasks import _trials_under

    events: list[str] = []

    class Held:
        def let_window_in(self, on_wait=None):
            events.append("point")
            return False

    class Model(torch.nn.Module):
        def forward(self, x):
            events.append("forward")
            return x * 2

    ns = {"get_inputs": lambda: [torch.randn(64, 64)]}
    payload = {"init_seed": 3, "trials": [{"seed": s, "dist": "natural"} for s in (1, 2, 3)]}
    model = Model()
    result = _trials_under(ns, model, "cpu", payload, {0: model.state_dict()}, Held())
    assert [t["usable"] for t in result["trials"]] == [True, True, True]
    assert events == ["point", "point", "forward"] * 3
    assert set(result["parts_s"]) == {"stepped_aside", "written", "other"}
    assert 0 <= result["stretch_s"] <= sum(result["parts_s"].values()) + 0.01
    events.clear()  # without a hold (no GPU lock): no point, the same trials
    alone = _trials_under(ns, model, "cpu", payload, {0: model.state_dict()}, None)
    assert events == ["forward"] * 3 and len(alone["trials"]) == 3
