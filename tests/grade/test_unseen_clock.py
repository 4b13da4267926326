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
