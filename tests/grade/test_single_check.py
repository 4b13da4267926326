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


def test_the_one_call_check_is_held_to_the_parts_written_and_its_answer_compared(
        tmp_path, monkeypatch):
    seen: dict = {}

    def keep(*args, **kwargs):
        seen.update(args=args, kwargs=kwargs)
        return judge(*args, **kwargs)

    monkeypatch.setattr(G, "judge", keep)
    # (off a graph two unseen trials are timed; then spares, where those read slow)
    policy = Policy(trials=2, unseen_trials=1, unseen_spares=4, timing_settings=SHORT_WINDOW)
    grader = G.Grader("cpu", policy=policy, cache_root=str(tmp_path))
    reference = (FIXTURES / "submissions" / "ref_scale_add.py").read_text()
    honest = (FIXTURES / "submissions" / "honest_scale_add.py").read_text()
    verdict = grader.grade(reference, honest)
    assert verdict["correct"] and not verdict["hacks"], verdict.get("hack_details")
    args, kwargs = seen["args"], seen["kwargs"]
    facts, window = args[2].value, kwargs["window"]
    assert "single" not in (facts["unseen"] or {}) or facts["unseen"]["single"] is None
    made = len(facts["unseen"]["checks"])  # the next trial is the spare none saw
    assert sorted(window["late_released"]) == list(range(made))
    hidden = [t for t in args[0]["trials"] if t["usable"] and t.get("hidden")]
    assert 2 <= made < len(hidden) == 5
    parts = tuple(range(made + 1))

    def rejudge(single, released=parts) -> dict:
        unseen = {**facts["unseen"], "single": single}
        run = dataclasses.replace(args[2], value=dict(facts, unseen=unseen))
        return judge(args[0], args[1], run, *args[3:],
                     **{**kwargs, "window": dict(window, late_released=list(released))})

    right = {"hidden": made, "outputs": hidden[made]["outputs"], "busy_us": 5.0}
    passed = rejudge(right)
    assert passed["correct"] and not passed["hacks"], passed.get("hack_details")
    assert passed["checks"][f"unseen_single:{made}"]["passed"] is True
    # its answer another trial's: wrong on inputs first shown while timed
    wrong = rejudge({**right, "outputs": hidden[0]["outputs"]})
    assert "timing_behaviour" in wrong["hacks"] and not wrong["correct"]
    assert wrong["checks"][f"unseen_single:{made}"]["passed"] is False
    # on a trial the unseen check had, a later one, none the parent gave, without its part
    # written, or no report at all
    for single, released in (({**right, "hidden": 0}, parts), ({**right, "hidden": made + 1},
                                                                parts + (made + 1,)),
                             ({**right, "hidden": 7}, parts), ({**right, "hidden": str(made)},
                                                                parts),
                             (right, parts[:-1]), ([made], parts)):
        edited = rejudge(single, released)
        assert "timing_behaviour" in edited["hacks"] and not edited["correct"], (single,
                                                                                released)
    # the spare's part written with no check reported on it: not as the window asked
    missing = rejudge(None, parts)
    assert "timing_behaviour" in missing["hacks"]
    assert not rejudge(None, parts[:-1])["hacks"]  # the control: the facts as they came
