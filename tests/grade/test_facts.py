"""The worker-to-judge contract (grade.facts): typed once, read-only, read as the worker's dict
reads (a fact not sent is absent; one sent is kept as sent)."""
import dataclasses

import pytest
from kernelmill.grade.facts import CallFacts, Facts, GhostFacts, RunFacts, TimedFacts
from kernelmill.validate.harness import WorkerResult


def test_a_worker_result_is_typed_once_and_read_like_its_dict():
    value = {"calls": [{"kind": "fresh", "trial": 0, "threads": ["t"], "launches": 2,
                        "ext_calls": 0, "outputs": None, "structure": "tensor",
                        "inputs_after": []}],
             "timed": {"outputs": None, "changed_while_timed": []}, "ghost": "forged",
             "patched": ["torch.allclose"], "unknown_fact": 1}
    facts = Facts.from_result(WorkerResult(ok=True, value=value, tampered=True))
    run = facts.run
    assert isinstance(run, RunFacts) and facts.tampered and facts.ok
    call = run.calls[0]
    assert isinstance(call, CallFacts) and call.launches == 2 and call["threads"] == ["t"]
    assert "thread_starts" not in call and call.get("thread_starts", 0) == 0
    assert call.thread_starts == 0 and call.get("subclass") is None
    assert isinstance(run.timed, TimedFacts) and run.timed.changed_while_timed == []
    assert run.ghost == "forged"  # a value that is not a dict is judged as it came
    assert "timing" not in run and run.timing is None and run.get("timing") is None
    assert "unknown_fact" not in run.present  # only the contract's facts are read
    with pytest.raises(dataclasses.FrozenInstanceError):
        call.launches = 0
    with pytest.raises(KeyError):
        call["busy_us"]


def test_a_failed_run_has_no_worker_facts():
    facts = Facts.from_result(WorkerResult(ok=False, error={"stage": "import", "message": "x"},
                                           stages=[("import", 0.1)], leaked_processes=2))
    assert facts.run is None and facts.leaked_processes == 2
    assert facts.stages == (("import", 0.1),)


def test_a_fact_sent_as_none_is_present():
    ghost = GhostFacts.from_dict({"trial": 0, "reuses_previous": None})
    assert "reuses_previous" in ghost and ghost.get("reuses_previous", False) is None
    assert "previous_poisoned" not in ghost


def test_a_check_reading_a_fact_no_group_declares_is_an_error():
    """``from_dict`` keeps declared fields only: a fact a check reads and its group lacks is
    always absent, and the check silently reads its default (the unseen check's kernel busy
    times were lost so, and honest graphs in groups were judged by host latency)."""
    from kernelmill.grade.facts import UndeclaredFact, UnseenFacts

    unseen = UnseenFacts.from_dict({"seen_busy_ms": [0.05], "made_up": 1})
    assert unseen.get("seen_busy_ms") == [0.05] and unseen.get("after_busy_ms") is None
    with pytest.raises(UndeclaredFact):
        unseen.get("made_up")
    with pytest.raises(UndeclaredFact):
        "made_up" in unseen  # noqa: B015
