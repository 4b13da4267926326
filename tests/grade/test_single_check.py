"""The one-call graph's check (``UnseenFacts.single``): on CUDA, after the unseen-input check,
the candidate's window replays its one-call graph on the next hidden trial, a spare none of its
calls saw. The judge holds that report to the parts the parent wrote and compares its answer.
A real CPU grade (no graph, so no such check), its facts then edited as a CUDA run's would
read."""
import dataclasses

from conftest import FIXTURES

from kernelmill.grade import grader as G
from kernelmill.grade.judge import judge
from kernelmill.grade.policy import Policy

SHORT_WINDOW = {"cap_ms": 30.0, "round_ms": 2.0, "warm_ms": 0.0, "min_reps": 3, "max_reps": 6,
                "loop_ms": 5.0, "warmup": 1, "sample_ms": 0.5}


def judged_scale_add(tmp_path, monkeypatch, policy: Policy) -> tuple[tuple, dict]:
    """An honest scale-add graded on CPU under ``policy`` (certified), and the arguments the
    grader's ``judge`` was called with, for a test to judge again with edited facts."""
    seen: dict = {}

    def keep(*args, **kwargs):
        seen.update(args=args, kwargs=kwargs)
        return judge(*args, **kwargs)

    monkeypatch.setattr(G, "judge", keep)
    grader = G.Grader("cpu", policy=policy, cache_root=str(tmp_path))
    reference = (FIXTURES / "submissions" / "ref_scale_add.py").read_text()
    honest = (FIXTURES / "submissions" / "honest_scale_add.py").read_text()
    verdict = grader.grade(reference, honest)
    assert verdict["correct"] and not verdict["hacks"], verdict.get("hack_details")
    return seen["args"], seen["kwargs"]


def test_the_one_call_check_is_held_to_the_parts_written_and_its_answer_compared(
        tmp_path, monkeypatch):
    """Where the timer replayed a graph of several calls, the last hidden trial is the one-call
    check's (``checks.probes.check_trials``): never a spare, its part written after the
    check's, the check made always. Its answer is compared like any unseen one."""
    # one unseen trial timed off a graph too (a graph's run times one), three spares; the
    # first check alone (``single_warm`` off: ``test_single_warm`` has both)
    args, kwargs = judged_scale_add(tmp_path, monkeypatch, Policy(
        trials=2, unseen_trials=1, unseen_trials_ungraphed=1, unseen_spares=3,
        timing_settings={**SHORT_WINDOW, "single_warm": False}))
    facts, window = args[2].value, kwargs["window"]
    assert facts["unseen"].get("single") is None  # off a graph: no check
    made = len(facts["unseen"]["checks"])  # the unseen trial, and any spare it called for
    assert sorted(window["late_released"]) == list(range(made))
    hidden = [t for t in args[0]["trials"] if t["usable"] and t.get("hidden")]
    assert 1 <= made < len(hidden) == 4
    last = len(hidden) - 1
    parts = (*range(made), last)
    # (as a CUDA run reads: a graph of 4 calls, one hot replay's calls alike)
    graphed = {**facts["unseen"], "method": "cuda_graph", "calls": 4,
               "even_calls_us": [5.0] * 4, "even_overlap_us": 0.0}

    def rejudge(single, released=parts, unseen=graphed) -> dict:
        unseen = {**unseen, "single": single}
        run = dataclasses.replace(args[2], value=dict(facts, unseen=unseen))
        return judge(args[0], args[1], run, *args[3:],
                     **{**kwargs, "window": dict(window, late_released=list(released))})

    right = {"hidden": last, "outputs": hidden[last]["outputs"], "busy_us": 5.0, "ms": 0.012}
    passed = rejudge(right)
    assert passed["correct"] and not passed["hacks"], passed.get("hack_details")
    assert passed["checks"][f"unseen_single:{last}"]["passed"] is True
    # its answer another trial's: wrong on inputs first shown while timed
    wrong = rejudge({**right, "outputs": hidden[0]["outputs"]})
    assert "timing_behaviour" in wrong["hacks"] and not wrong["correct"]
    assert wrong["checks"][f"unseen_single:{last}"]["passed"] is False
    # left out (its part written or not), on another trial, on none the parent gave, without
    # its part written, or not a report
    for single, released in ((None, parts), (None, parts[:-1]),
                             ({**right, "hidden": made}, (*range(made + 1),)),
                             ({**right, "hidden": 0}, parts), ({**right, "hidden": 7}, parts),
                             ({**right, "hidden": str(last)}, parts), (right, parts[:-1]),
                             ([last], parts)):
        edited = rejudge(single, released)
        assert "timing_behaviour" in edited["hacks"] and not edited["correct"], (single,
                                                                                released)
    # a graph of one call, or no graph: no check, and none may be reported
    for unseen in ({**graphed, "calls": 1}, facts["unseen"]):
        assert not rejudge(None, parts[:-1], unseen)["hacks"]
        assert "timing_behaviour" in rejudge(right, parts, unseen)["hacks"]

    # its readings held to each other (each the worker's word): busy time past its replay's
    # span, none, or none with the device readings not failed, a call alone under 0.3 of the
    # replays' first call, a replay of other than 4 calls, first calls apart from the replays'
    readings = {**graphed, "unseen_device_us": [4.8], "unseen_calls_us": [[4.8] * 4]}
    assert not rejudge(right, parts, readings)["hacks"]
    for single, unseen in (({**right, "busy_us": 40.0}, readings),
                           ({**right, "ms": None}, readings),
                           ({**right, "busy_us": None}, readings),
                           ({**right, "busy_us": float("nan")}, readings),
                           ({**right, "busy_us": 1.2}, readings),
                           (right, {**readings, "unseen_calls_us": [[4.8]]}),
                           (right, {**readings, "unseen_device_us": [9.6]}),
                           (right, {**readings, "unseen_device_us": []})):
        edited = rejudge(single, parts, unseen)
        assert "timing_behaviour" in edited["hacks"], (single, unseen)
        assert "hang together" in edited["hack_details"]["timing_behaviour"]
    # a forged non-list reading fails, not the judge
    assert "timing_behaviour" in rejudge(right, parts, {**readings, "unseen_calls_us": 3.0})[
        "hacks"]
    # the check's part written before the unseen trials' (the parent's own order of parts)
    assert "timing_behaviour" in rejudge(right, (last, *range(made)))["hacks"]
