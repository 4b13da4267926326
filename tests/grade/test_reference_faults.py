"""A reference that returns None, an int or nothing, or that crashes, is the problem's fault:
a ReferenceError (batch: ``reference_failed``), never a verdict against the candidate."""
from __future__ import annotations

import json

import pytest

from conftest import FIXTURES
from kernelmill.core.store import read_jsonl
from kernelmill.grade.batch import grade_file
from kernelmill.grade.grader import Grader, ReferenceError
from kernelmill.grade.policy import Policy

REFERENCE = (FIXTURES / "submissions" / "ref_scale_add.py").read_text()
HONEST = (FIXTURES / "submissions" / "honest_scale_add.py").read_text()
FORWARD = "        return 2.0 * x + y\n"
BROKEN = {
    "none": REFERENCE.replace(FORWARD, "        2.0 * x + y\n"),
    "int": REFERENCE.replace(FORWARD, "        return 3\n"),
    "empty_tuple": REFERENCE.replace(FORWARD, "        return ()\n"),
    "crash": REFERENCE.replace(FORWARD, "        raise RuntimeError('reference bug')\n"),
}
POLICY = Policy(time=False, trials=1, timeout_s=120)


@pytest.mark.parametrize("kind, message", [
    ("none", r"reference forward returned NoneType \(NoneType\) on trial 0"),
    ("int", r"reference forward returned int \(int\) on trial 0"),
    ("empty_tuple", r"reference forward returned tuple:0 \(no output\) on trial 0"),
    ("crash", r"reference failed in reference forward: .*reference bug"),
], ids=["none", "int", "empty_tuple", "crash"])
def test_a_broken_reference_is_a_reference_error(kind, message):
    with pytest.raises(ReferenceError, match=message):
        Grader("cpu", policy=POLICY).grade(BROKEN[kind], HONEST)


def test_the_same_candidate_is_certified_against_the_sound_reference():
    verdict = Grader("cpu", policy=POLICY).grade(REFERENCE, HONEST)
    assert verdict["correct"] and not verdict["error"]


def test_batch_marks_the_reference_failed_and_caches_nothing(tmp_path):
    problems = tmp_path / "problems.jsonl"
    problems.write_text(json.dumps({"id": "p_none", "source": BROKEN["none"]}) + "\n")
    submissions = tmp_path / "submissions.jsonl"
    submissions.write_text(json.dumps({"submission_id": "s1", "problem_id": "p_none",
                                       "source": HONEST}) + "\n")
    cache = tmp_path / "cache.jsonl"
    stats = grade_file(problems, submissions, tmp_path / "verdicts.jsonl", device="cpu",
                       policy=POLICY, cache_path=cache)
    (verdict,) = read_jsonl(tmp_path / "verdicts.jsonl")
    assert verdict["reference_failed"] and verdict["error"]["stage"] == "reference"
    assert "returned NoneType" in verdict["error"]["message"]
    assert stats.counts["dropped: reference failed"] == 1 and stats.n_kept == 0
    assert not cache.exists() or cache.read_text() == ""
